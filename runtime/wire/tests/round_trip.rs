//! Every message variant survives encode -> chunked FrameDecoder -> checked access ->
//! deserialize unchanged, alone and bundled; and the size and zero-copy claims hold.

mod common;

use common::{dispatch, feed_in_chunks, from_agent_samples, rng, to_agent_samples};
use saker_wire::{
    AlignedVec, ArchivedToAgent, FrameDecoder, ROUTE_PEER, ToAgent, decode_from_agent,
    decode_to_agent, deserialize, encode, encode_into, encode_preamble,
};

#[test]
fn every_to_agent_variant_round_trips_through_chunked_decoder() {
    let mut rng = rng(1);
    for (route, message) in to_agent_samples().into_iter().enumerate() {
        let route = route as u32;
        let bytes = encode(route, &message).unwrap();
        for max_chunk in [1, 3, 7, 8, 13, 64, bytes.len()] {
            let mut decoder = FrameDecoder::new();
            let frames = feed_in_chunks(&mut decoder, &bytes, &mut rng, max_chunk).unwrap();
            assert_eq!(frames.len(), 1, "{message:?}");
            decoder.finish().unwrap();
            let frame = &frames[0];
            assert_eq!(frame.route, route);
            let archived = frame.access_to_agent().unwrap();
            assert_eq!(deserialize::<ToAgent>(archived).unwrap(), message);
            assert_eq!(decode_to_agent(&frame.payload).unwrap(), message);
        }
    }
}

#[test]
fn every_from_agent_variant_round_trips_through_chunked_decoder() {
    let mut rng = rng(2);
    for message in from_agent_samples() {
        let bytes = encode(ROUTE_PEER, &message).unwrap();
        for max_chunk in [1, 5, 8, 9, 100, bytes.len()] {
            let mut decoder = FrameDecoder::new();
            let frames = feed_in_chunks(&mut decoder, &bytes, &mut rng, max_chunk).unwrap();
            assert_eq!(frames.len(), 1);
            decoder.finish().unwrap();
            assert_eq!(frames[0].route, ROUTE_PEER);
            assert_eq!(
                frames[0].decode::<saker_wire::FromAgent>().unwrap(),
                message
            );
            assert_eq!(decode_from_agent(&frames[0].payload).unwrap(), message);
        }
    }
}

/// Bundling: many frames appended to one buffer (behind a preamble) come out in order,
/// whatever the chunk boundaries.
#[test]
fn bundled_frames_in_one_buffer_decode_in_order() {
    let messages = to_agent_samples();
    let mut buffer = AlignedVec::new();
    buffer.extend_from_slice(&encode_preamble());
    for (route, message) in messages.iter().enumerate() {
        encode_into(&mut buffer, route as u32, message).unwrap();
    }
    assert_eq!(buffer.len() % 8, 0);

    let mut rng = rng(3);
    for _ in 0..50 {
        let mut decoder = FrameDecoder::new().expect_preamble();
        let frames = feed_in_chunks(&mut decoder, &buffer, &mut rng, 40).unwrap();
        decoder.finish().unwrap();
        assert_eq!(frames.len(), messages.len());
        for (route, (frame, message)) in frames.iter().zip(&messages).enumerate() {
            assert_eq!(frame.route, route as u32);
            assert_eq!(&frame.decode::<ToAgent>().unwrap(), message);
        }
    }
}

/// The claim in `messages.rs`: a thousand array tasks and their job definition fit in
/// one frame of about 24 KB, header and padding included.
#[test]
fn dispatch_of_thousand_array_tasks_is_under_30_kb() {
    let message = ToAgent::Dispatch(dispatch(1, 1000));
    let bytes = encode(0, &message).unwrap();
    assert!(bytes.len() < 30_000, "{} bytes", bytes.len());
    assert!(
        bytes.len() > 24_000,
        "{} bytes: assignments went missing?",
        bytes.len()
    );
}

/// Access is zero-copy: after validation, the 1024 assignments and the job's strings
/// are read in place from the frame's buffer, not from copies.
#[test]
fn access_reads_a_1024_task_dispatch_in_place() {
    let message = ToAgent::Dispatch(dispatch(1, 1024));
    let bytes = encode(0, &message).unwrap();
    let mut decoder = FrameDecoder::new();
    decoder.push(&bytes);
    let frame = decoder.next_frame().unwrap().unwrap();

    let payload = frame.payload.as_slice().as_ptr_range();
    let inside = |address: *const u8| payload.contains(&address);

    let ArchivedToAgent::Dispatch(archived) = frame.access_to_agent().unwrap() else {
        panic!("not a dispatch");
    };
    assert_eq!(archived.tasks.len(), 1024);
    let tasks = archived.tasks.as_slice().as_ptr_range();
    assert!(inside(tasks.start.cast()));
    assert!(tasks.end.cast::<u8>() <= payload.end);
    let saker_wire::ArchivedPayload::Command(command) = &archived.jobs[0].payload else {
        panic!("a command job")
    };
    let argv = &command.argv;
    assert!(
        argv.iter()
            .all(|argument| inside(argument.as_str().as_ptr()))
    );

    let sum: u64 = archived
        .tasks
        .iter()
        .map(|task| task.task.to_native().0)
        .sum();
    assert_eq!(sum, (0..1024).map(|index| 1_000_000 + index).sum::<u64>());
}

#[test]
fn link_messages_round_trip_and_are_not_mistaken_for_other_directions() {
    use saker_wire::{Link, ROUTE_LINK, decode};
    for message in [
        Link::Hello {
            position: 0,
            session: u64::MAX,
        },
        Link::Hello {
            position: 17,
            session: 7,
        },
        Link::Heartbeat,
        Link::Rejoin,
        Link::Child { node: 41 },
        Link::Superseded { node: u32::MAX },
    ] {
        let bytes = encode(ROUTE_LINK, &message).unwrap();
        let mut decoder = FrameDecoder::new();
        decoder.push(&bytes);
        let frame = decoder.next_frame().unwrap().unwrap();
        assert_eq!(frame.route, ROUTE_LINK);
        assert_eq!(decode::<Link>(&frame.payload).unwrap(), message);
    }
    // A truncated link payload is an error, not a panic.
    let bytes = encode(
        ROUTE_LINK,
        &Link::Hello {
            position: 3,
            session: 9,
        },
    )
    .unwrap();
    let payload = &bytes[saker_wire::FRAME_HEADER_LEN..];
    assert!(decode::<Link>(&payload[..payload.len() / 2]).is_err());
}
