use super::*;
use crate::messages::{ROUTE_PEER, ToAgent};

fn cancel(attempts: &[u64]) -> ToAgent {
    ToAgent::Cancel {
        attempts: attempts.iter().copied().map(crate::AttemptId).collect(),
    }
}

fn drain(decoder: &mut FrameDecoder) -> Vec<Frame> {
    let mut frames = Vec::new();
    while let Some(frame) = decoder.next_frame().unwrap() {
        frames.push(frame);
    }
    frames
}

#[test]
fn preamble_round_trips() {
    let preamble = encode_preamble();
    assert_eq!(&preamble[..4], b"SAKR");
    assert_eq!(preamble[4..], PROTOCOL_VERSION.to_le_bytes());
    check_preamble(&preamble).unwrap();
}

#[test]
fn preamble_with_wrong_magic_is_bad_magic_even_if_version_is_also_wrong() {
    let mut preamble = *b"HTTP/1.1";
    assert!(matches!(
        check_preamble(&preamble),
        Err(WireError::BadMagic { found }) if &found == b"HTTP"
    ));
    preamble[..4].copy_from_slice(b"SAKr");
    assert!(matches!(
        check_preamble(&preamble),
        Err(WireError::BadMagic { .. })
    ));
}

#[test]
fn preamble_with_other_version_names_both_versions() {
    let mut preamble = encode_preamble();
    preamble[4..].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
    match check_preamble(&preamble) {
        Err(WireError::VersionMismatch { local, peer }) => {
            assert_eq!(local, PROTOCOL_VERSION);
            assert_eq!(peer, PROTOCOL_VERSION + 1);
        }
        other => panic!("expected VersionMismatch, got {other:?}"),
    }
}

#[test]
fn header_round_trips_and_pads_to_eight() {
    let header = FrameHeader {
        len: 13,
        route: 0xdead_beef,
    };
    let bytes = header.encode();
    assert_eq!(bytes[..4], 13u32.to_le_bytes());
    assert_eq!(FrameHeader::parse(&bytes, 13).unwrap(), header);
    assert_eq!(header.padded_len(), 16);
    for (len, padded) in [
        (0, 0),
        (1, 8),
        (8, 8),
        (9, 16),
        (MAX_PAYLOAD_LEN_CEILING, MAX_PAYLOAD_LEN_CEILING),
    ] {
        assert_eq!(FrameHeader { len, route: 0 }.padded_len(), padded as usize);
    }
}

#[test]
fn header_above_limit_is_rejected_and_limit_is_clamped_to_ceiling() {
    let bytes = FrameHeader { len: 17, route: 0 }.encode();
    assert!(matches!(
        FrameHeader::parse(&bytes, 16),
        Err(WireError::PayloadTooLarge { len: 17, max: 16 })
    ));
    let bytes = FrameHeader {
        len: u32::MAX,
        route: 0,
    }
    .encode();
    assert!(matches!(
        FrameHeader::parse(&bytes, u32::MAX),
        Err(WireError::PayloadTooLarge {
            max: MAX_PAYLOAD_LEN_CEILING,
            ..
        })
    ));
}

#[test]
fn encoded_frame_is_header_payload_and_zero_padding() {
    let bytes = encode(7, &cancel(&[1, 2, 3])).unwrap();
    assert_eq!(bytes.len() % FRAME_ALIGNMENT, 0);
    let header = FrameHeader::parse(bytes[..8].try_into().unwrap(), u32::MAX).unwrap();
    assert_eq!(header.route, 7);
    assert_eq!(FRAME_HEADER_LEN + header.padded_len(), bytes.len());
    assert!(
        bytes[FRAME_HEADER_LEN + header.len as usize..]
            .iter()
            .all(|&byte| byte == 0)
    );
    let payload = &bytes[FRAME_HEADER_LEN..FRAME_HEADER_LEN + header.len as usize];
    // The payload sits at offset 8 of a 16-aligned buffer: 8-aligned, accessible in place.
    assert_eq!(decode::<ToAgent>(payload).unwrap(), cancel(&[1, 2, 3]));
}

#[test]
fn encode_into_a_buffer_off_a_frame_boundary_fails_and_leaves_it_unchanged() {
    let mut buffer = AlignedVec::new();
    buffer.extend_from_slice(&[1, 2, 3]);
    assert!(matches!(
        encode_into(&mut buffer, 0, &cancel(&[])),
        Err(WireError::UnalignedBuffer {
            len: 3,
            required: 8
        })
    ));
    assert_eq!(buffer.as_slice(), &[1, 2, 3]);
}

#[test]
fn oversized_payload_is_refused_by_the_encoder_and_rolled_back() {
    let mut buffer = AlignedVec::new();
    encode_into(&mut buffer, 1, &cancel(&[5])).unwrap();
    let before = buffer.to_vec();
    let huge = vec![0u8; DEFAULT_MAX_PAYLOAD_LEN as usize + 1];
    assert!(matches!(
        encode_raw_into(&mut buffer, 2, &huge),
        Err(WireError::PayloadTooLarge {
            max: DEFAULT_MAX_PAYLOAD_LEN,
            ..
        })
    ));
    assert_eq!(buffer.as_slice(), before.as_slice());
}

#[test]
fn relayed_frame_keeps_its_payload_under_a_new_route() {
    let mut decoder = FrameDecoder::new();
    decoder.push(&encode(ROUTE_PEER, &cancel(&[4, 5])).unwrap());
    let mut frame = decoder.next_frame().unwrap().unwrap();
    frame.route = 12;
    let mut relayed = AlignedVec::new();
    frame.encode_into(&mut relayed).unwrap();
    assert_eq!(
        relayed.as_slice(),
        encode(12, &cancel(&[4, 5])).unwrap().as_slice()
    );
}

#[test]
fn two_frames_split_at_every_byte_come_out_whole() {
    let mut stream = encode(1, &cancel(&[1])).unwrap();
    encode_into(&mut stream, 2, &cancel(&[2, 3, 4])).unwrap();
    for split in 0..=stream.len() {
        let mut decoder = FrameDecoder::new();
        decoder.push(&stream[..split]);
        let mut frames = drain(&mut decoder);
        decoder.push(&stream[split..]);
        frames.extend(drain(&mut decoder));
        decoder.finish().unwrap();
        let routes: Vec<u32> = frames.iter().map(|frame| frame.route).collect();
        assert_eq!(routes, [1, 2], "split at {split}");
        assert_eq!(frames[1].decode::<ToAgent>().unwrap(), cancel(&[2, 3, 4]));
    }
}

#[test]
fn empty_payload_is_a_frame_of_its_own_and_fails_access() {
    let mut decoder = FrameDecoder::new();
    decoder.push(&FrameHeader { len: 0, route: 3 }.encode());
    let frame = decoder.next_frame().unwrap().unwrap();
    assert_eq!(frame.route, 3);
    assert!(frame.payload.is_empty());
    assert!(matches!(
        frame.access_to_agent(),
        Err(WireError::InvalidPayload {
            message: "ToAgent",
            len: 0,
            ..
        })
    ));
    decoder.finish().unwrap();
}

/// A message of 4 bytes, which every frame pads to 8 (the tree's own messages all
/// hold 8-byte ids now, so their sizes are multiples of 8 and they have no padding).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, PartialEq)]
#[rkyv(derive(Debug))]
struct Small(u32);

impl super::sealed::Sealed for Small {}

impl Message for Small {
    const NAME: &'static str = "Small";
}

#[test]
fn padding_content_is_ignored() {
    let sample = Small(0x5eed);
    let mut stream = encode(1, &sample).unwrap();
    let header = FrameHeader::parse(stream[..8].try_into().unwrap(), u32::MAX).unwrap();
    assert!(
        header.padded_len() > header.len as usize,
        "sample must have padding"
    );
    let last = stream.len() - 1;
    stream[last] = 0xaa;
    let mut decoder = FrameDecoder::new();
    decoder.push(&stream);
    let frame = decoder.next_frame().unwrap().unwrap();
    assert_eq!(frame.payload.len(), header.len as usize);
    assert_eq!(frame.decode::<Small>().unwrap(), sample);
}

#[test]
fn decoder_limit_is_inclusive() {
    let mut decoder = FrameDecoder::with_max_payload_len(16);
    assert_eq!(decoder.max_payload_len(), 16);
    decoder.push(&FrameHeader { len: 16, route: 0 }.encode());
    decoder.push(&[0; 16]);
    assert!(decoder.next_frame().unwrap().is_some());
    decoder.push(&FrameHeader { len: 17, route: 0 }.encode());
    assert!(matches!(
        decoder.next_frame(),
        Err(WireError::PayloadTooLarge { len: 17, max: 16 })
    ));
    assert_eq!(
        FrameDecoder::with_max_payload_len(u32::MAX).max_payload_len(),
        MAX_PAYLOAD_LEN_CEILING
    );
}

#[test]
fn decoder_checks_preamble_split_across_pushes() {
    let mut stream = AlignedVec::new();
    stream.extend_from_slice(&encode_preamble());
    encode_into(&mut stream, 6, &cancel(&[6])).unwrap();
    let mut decoder = FrameDecoder::new().expect_preamble();
    assert!(matches!(
        decoder.finish(),
        Err(WireError::TruncatedFrame {
            received: 0,
            expected: PREAMBLE_LEN
        })
    ));
    for byte in stream.iter() {
        decoder.push(std::slice::from_ref(byte));
    }
    assert_eq!(drain(&mut decoder).len(), 1);
    decoder.finish().unwrap();
}

#[test]
fn decoder_reports_preamble_errors_every_time() {
    let mut wrong_version = encode_preamble();
    wrong_version[4] ^= 0x80;
    let mut decoder = FrameDecoder::new().expect_preamble();
    decoder.push(&wrong_version);
    decoder.push(&encode(0, &cancel(&[])).unwrap());
    for _ in 0..2 {
        assert!(matches!(
            decoder.next_frame(),
            Err(WireError::VersionMismatch {
                local: PROTOCOL_VERSION,
                ..
            })
        ));
    }

    let mut decoder = FrameDecoder::new().expect_preamble();
    decoder.push(b"GET / HT");
    assert!(
        matches!(decoder.next_frame(), Err(WireError::BadMagic { found }) if &found == b"GET ")
    );
    assert!(matches!(decoder.finish(), Err(WireError::BadMagic { .. })));
}

#[test]
fn finish_reports_how_far_an_unfinished_frame_got() {
    let stream = encode(0, &cancel(&[1, 2])).unwrap();
    let mut decoder = FrameDecoder::new();
    decoder.push(&stream[..3]);
    assert!(matches!(
        decoder.finish(),
        Err(WireError::TruncatedFrame {
            received: 3,
            expected: FRAME_HEADER_LEN
        })
    ));
    decoder.push(&stream[3..stream.len() - 1]);
    let expected = stream.len() - FRAME_HEADER_LEN;
    match decoder.finish() {
        Err(WireError::TruncatedFrame {
            received,
            expected: found,
        }) => {
            assert_eq!((received, found), (expected - 1, expected));
        }
        other => panic!("expected TruncatedFrame, got {other:?}"),
    }
}
