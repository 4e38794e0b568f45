//! Hostile input never panics: corrupted, truncated, oversized and random frames end in
//! a `WireError` or (for mutations the validator cannot tell apart from a real message)
//! in a message that deserializes cleanly.

mod common;

use common::{feed_in_chunks, from_agent_samples, rng, to_agent_samples};
use rand::RngExt;
use saker_wire::{
    AlignedVec, ArchivedToAgent, AttemptId, DEFAULT_MAX_PAYLOAD_LEN, FRAME_HEADER_LEN,
    FrameDecoder, FrameHeader, FromAgent, ToAgent, WireError, access_from_agent, access_to_agent,
    deserialize, encode, encode_into,
};

/// Every sample message of both directions, encoded as one frame each.
fn sample_frames() -> Vec<AlignedVec> {
    let mut frames: Vec<AlignedVec> = to_agent_samples()
        .iter()
        .map(|message| encode(1, message).unwrap())
        .collect();
    frames.extend(
        from_agent_samples()
            .iter()
            .map(|message| encode(2, message).unwrap()),
    );
    frames
}

fn aligned(bytes: &[u8]) -> AlignedVec {
    let mut buffer = AlignedVec::with_capacity(bytes.len());
    buffer.extend_from_slice(bytes);
    buffer
}

/// Checks a payload as both directions; whatever validates must also deserialize.
/// Returns how many of the two accesses succeeded.
fn probe(payload: &[u8]) -> usize {
    let mut accepted = 0;
    if let Ok(archived) = access_to_agent(payload) {
        deserialize::<ToAgent>(archived).unwrap();
        accepted += 1;
    }
    if let Ok(archived) = access_from_agent(payload) {
        deserialize::<FromAgent>(archived).unwrap();
        accepted += 1;
    }
    accepted
}

/// Offset of `field` inside `payload`.
fn offset_of<T>(payload: &[u8], field: &T) -> usize {
    std::ptr::from_ref(field).cast::<u8>().addr() - payload.as_ptr().addr()
}

#[test]
fn random_byte_mutations_of_payloads_never_panic() {
    let mut rng = rng(10);
    let mut rejected = 0;
    let mut total = 0;
    for frame in sample_frames() {
        let payload = &frame[FRAME_HEADER_LEN..];
        let header = FrameHeader::parse(frame[..8].try_into().unwrap(), u32::MAX).unwrap();
        let payload = &payload[..header.len as usize];
        for _ in 0..400 {
            let mut mutated = aligned(payload);
            for _ in 0..rng.random_range(1..=4) {
                let position = rng.random_range(0..mutated.len());
                mutated[position] = rng.random();
            }
            total += 2;
            rejected += 2 - probe(&mutated);
        }
    }
    // The mutations must actually reach the validator's error paths.
    assert!(rejected > total / 4, "only {rejected} of {total} rejected");
}

#[test]
fn random_mutations_of_whole_frames_through_the_decoder_never_panic() {
    let mut rng = rng(11);
    let frames = sample_frames();
    for round in 0..2_000 {
        let frame = &frames[round % frames.len()];
        let mut mutated = frame.to_vec();
        for _ in 0..rng.random_range(1..=3) {
            let position = rng.random_range(0..mutated.len());
            mutated[position] ^= 1 << rng.random_range(0..8);
        }
        let mut decoder = FrameDecoder::with_max_payload_len(1 << 16);
        let Ok(decoded) = feed_in_chunks(&mut decoder, &mutated, &mut rng, 32) else {
            continue; // oversize header: rejected, fine
        };
        for frame in &decoded {
            probe(&frame.payload);
        }
        // A corrupted length either completes a frame, leaves one open, or both.
        if decoded.is_empty() {
            assert!(decoder.finish().is_err());
        }
    }
}

#[test]
fn truncation_at_every_length_is_detected() {
    for frame in sample_frames() {
        for len in 0..frame.len() {
            let mut decoder = FrameDecoder::new();
            decoder.push(&frame[..len]);
            assert!(
                decoder.next_frame().unwrap().is_none(),
                "frame from {len} bytes"
            );
            match decoder.finish() {
                Ok(()) => assert_eq!(len, 0),
                Err(WireError::TruncatedFrame { received, expected }) => {
                    assert!(received < expected);
                }
                Err(other) => panic!("unexpected error {other}"),
            }
            // The payload cut short, checked directly.
            let cut = aligned(&frame[FRAME_HEADER_LEN.min(len)..len]);
            probe(&cut);
        }
    }
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = rng(12);
    for _ in 0..2_000 {
        let mut bytes = vec![0u8; rng.random_range(0..600)];
        rng.fill(&mut bytes[..]);
        // Half the time, a plausible header so the garbage reaches the validator.
        if bytes.len() >= 8 && rng.random_bool(0.5) {
            let len = rng.random_range(0..(bytes.len() as u32 - 7));
            bytes[..4].copy_from_slice(&len.to_le_bytes());
        }
        let mut decoder = FrameDecoder::with_max_payload_len(4096);
        if let Ok(frames) = feed_in_chunks(&mut decoder, &bytes, &mut rng, 64) {
            for frame in &frames {
                probe(&frame.payload);
            }
        }
        probe(&aligned(&bytes));
    }
}

#[test]
fn huge_length_is_rejected_from_the_header_alone_after_earlier_frames() {
    let mut buffer = AlignedVec::new();
    encode_into(
        &mut buffer,
        5,
        &ToAgent::Cancel {
            attempts: vec![AttemptId(1)],
        },
    )
    .unwrap();
    for len in [u32::MAX, u32::MAX - 7, DEFAULT_MAX_PAYLOAD_LEN + 1] {
        let mut decoder = FrameDecoder::new();
        decoder.push(&buffer);
        // Only the header of the huge frame: no payload bytes follow.
        decoder.push(&FrameHeader { len, route: 0 }.encode());
        assert_eq!(decoder.next_frame().unwrap().unwrap().route, 5);
        for _ in 0..2 {
            match decoder.next_frame() {
                Err(WireError::PayloadTooLarge { len: found, max }) => {
                    assert_eq!(found, u64::from(len));
                    assert_eq!(max, DEFAULT_MAX_PAYLOAD_LEN);
                }
                other => panic!("expected PayloadTooLarge, got {other:?}"),
            }
        }
        // Later bytes are dropped; the error stays.
        decoder.push(&buffer);
        assert!(matches!(
            decoder.next_frame(),
            Err(WireError::PayloadTooLarge { .. })
        ));
        assert!(matches!(
            decoder.finish(),
            Err(WireError::PayloadTooLarge { .. })
        ));
    }
}

#[test]
fn wrong_enum_discriminants_are_rejected() {
    let to_agent_variants = 21;
    for message in to_agent_samples() {
        let frame = encode(0, &message).unwrap();
        let header = FrameHeader::parse(frame[..8].try_into().unwrap(), u32::MAX).unwrap();
        let payload = aligned(&frame[8..8 + header.len as usize]);
        let root = payload.len() - size_of::<ArchivedToAgent>();
        for tag in to_agent_variants..=u8::MAX {
            let mut mutated = payload.clone();
            mutated[root] = tag;
            assert!(access_to_agent(&mutated).is_err(), "tag {tag} accepted");
        }
        for tag in 0..to_agent_variants {
            let mut mutated = payload.clone();
            mutated[root] = tag;
            probe(&mutated); // another variant's layout over these bytes: no panic
        }
    }
    let from_agent_variants = 18;
    for message in from_agent_samples() {
        let frame = encode(0, &message).unwrap();
        let header = FrameHeader::parse(frame[..8].try_into().unwrap(), u32::MAX).unwrap();
        let payload = aligned(&frame[8..8 + header.len as usize]);
        let root = payload.len() - size_of::<saker_wire::ArchivedFromAgent>();
        for tag in from_agent_variants..=u8::MAX {
            let mut mutated = payload.clone();
            mutated[root] = tag;
            assert!(access_from_agent(&mutated).is_err(), "tag {tag} accepted");
        }
    }
}

fn payload_of(message: &ToAgent) -> AlignedVec {
    let frame = encode(0, message).unwrap();
    let header = FrameHeader::parse(frame[..8].try_into().unwrap(), u32::MAX).unwrap();
    aligned(&frame[8..8 + header.len as usize])
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
        .expect("needle in payload")
}

#[test]
fn invalid_utf8_in_strings_is_rejected() {
    // Out-of-line (longer than 8 bytes) and inline strings are stored differently.
    for reason in ["duplicate node id 17", "abcdefg"] {
        let payload = payload_of(&ToAgent::Refused {
            reason: reason.to_owned(),
        });
        let start = find(&payload, reason.as_bytes());
        // Not 0xff: in an inline string that byte terminates the string (still valid).
        for (position, byte) in [(0, 0x80), (2, 0xc3), (reason.len() - 1, 0xe2)] {
            let mut mutated = payload.clone();
            mutated[start + position] = byte;
            match access_to_agent(&mutated) {
                Err(WireError::InvalidPayload { message, .. }) => assert_eq!(message, "ToAgent"),
                other => panic!("invalid UTF-8 accepted: {other:?}"),
            }
        }
    }
}

#[test]
fn out_of_range_relative_pointers_are_rejected() {
    let payload = payload_of(&ToAgent::Cancel {
        attempts: vec![AttemptId(1), AttemptId(2), AttemptId(3)],
    });
    let ArchivedToAgent::Cancel { attempts } = access_to_agent(&payload).unwrap() else {
        panic!("not a cancel");
    };
    let vec_at = offset_of(&payload, attempts);
    let len = payload.len() as i32;
    let field = vec_at as i32;
    // ArchivedVec = relative offset (i32) then length (u32).
    for offset in [i32::MAX, i32::MIN, -field - 8, len - field, len, -1] {
        let mut mutated = payload.clone();
        mutated[vec_at..vec_at + 4].copy_from_slice(&offset.to_le_bytes());
        assert!(
            access_to_agent(&mutated).is_err(),
            "offset {offset} accepted"
        );
    }
    for count in [u32::MAX, 1 << 29, 4] {
        let mut mutated = payload.clone();
        mutated[vec_at + 4..vec_at + 8].copy_from_slice(&count.to_le_bytes());
        assert!(
            access_to_agent(&mutated).is_err(),
            "length {count} accepted"
        );
    }

    // An out-of-line string: length (u32 with tag bits) then relative offset (i32).
    let reason = "a reason long enough to be stored out of line";
    let payload = payload_of(&ToAgent::Refused {
        reason: reason.to_owned(),
    });
    let ArchivedToAgent::Refused { reason: archived } = access_to_agent(&payload).unwrap() else {
        panic!("not a refusal");
    };
    let string_at = offset_of(&payload, archived);
    let field = string_at as i32;
    let len = payload.len() as i32;
    for offset in [i32::MAX, i32::MIN, -field - 1, len - field - 4] {
        let mut mutated = payload.clone();
        mutated[string_at + 4..string_at + 8].copy_from_slice(&offset.to_le_bytes());
        assert!(
            access_to_agent(&mutated).is_err(),
            "offset {offset} accepted"
        );
    }
}

#[test]
fn misaligned_payload_is_an_error_not_a_panic() {
    let payload = payload_of(&ToAgent::Cancel {
        attempts: vec![AttemptId(9)],
    });
    let mut shifted: AlignedVec = AlignedVec::new();
    shifted.push(0);
    shifted.extend_from_slice(&payload);
    match access_to_agent(&shifted[1..]) {
        Err(WireError::UnalignedPayload { required, .. }) => assert_eq!(required, 8),
        other => panic!("expected UnalignedPayload, got {other:?}"),
    }
}
