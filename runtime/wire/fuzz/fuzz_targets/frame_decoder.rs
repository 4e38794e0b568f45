//! Arbitrary bytes, split in two pushes at a fuzzer-chosen point, through the frame
//! decoder; every frame is checked as both message directions, and whatever validates
//! is deserialized. Nothing may panic, and the decoder's bookkeeping must stay coherent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use saker_wire::{FrameDecoder, FromAgent, ToAgent, WireError};

fuzz_target!(|data: &[u8]| {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    // Low 7 bits pick the split point, the high bit whether a preamble is expected.
    let split = usize::from(control & 0x7f).min(stream.len());
    let mut decoder = FrameDecoder::with_max_payload_len(1 << 20);
    if control & 0x80 != 0 {
        decoder = decoder.expect_preamble();
    }
    let (first, second) = stream.split_at(split);
    let mut failed = false;
    for chunk in [first, second] {
        decoder.push(chunk);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    assert!(!failed, "frame returned after an error");
                    assert!(frame.payload.len() <= stream.len());
                    if let Ok(archived) = frame.access::<ToAgent>() {
                        saker_wire::deserialize::<ToAgent>(archived)
                            .expect("a validated ToAgent deserializes");
                    }
                    if let Ok(archived) = frame.access::<FromAgent>() {
                        saker_wire::deserialize::<FromAgent>(archived)
                            .expect("a validated FromAgent deserializes");
                    }
                }
                Ok(None) => break,
                Err(
                    WireError::PayloadTooLarge { .. }
                    | WireError::BadMagic { .. }
                    | WireError::VersionMismatch { .. },
                ) => {
                    failed = true;
                    break;
                }
                Err(other) => panic!("decoder produced an unexpected error: {other}"),
            }
        }
    }
    let _ = decoder.finish();
});
