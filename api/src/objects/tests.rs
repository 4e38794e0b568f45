use super::*;
use crate::pilot::Queued;

fn object_id(n: u128) -> ObjectId {
    ObjectId(n)
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Pair {
    left: Ref<Vec<u64>>,
    others: Vec<Ref<String>>,
}

#[test]
fn refs_archived_inside_an_input_are_recorded() {
    let pair = Pair {
        left: Ref::new(7, 10, None),
        others: vec![Ref::new(8, 1, None), Ref::new(9, 1, None)],
    };
    let (bytes, ids) = recording(|| rkyv::to_bytes::<rancor::Error>(&pair).unwrap());
    assert_eq!(ids, [7, 8, 9]);
    // Outside a recording nothing is noted, and the ids read back.
    let again = rkyv::to_bytes::<rancor::Error>(&pair).unwrap();
    assert_eq!(again.as_slice(), bytes.as_slice());
    let back: Pair = rkyv::from_bytes::<Pair, rancor::Error>(&bytes).unwrap();
    assert_eq!(back.left.id(), object_id(7));
    assert_eq!(back.others[1].id(), object_id(9));
    assert_eq!(recording(|| ()).1, Vec::<u128>::new());
}

#[test]
fn a_decoded_ref_owns_nothing_and_the_last_owned_clone_frees() {
    let (queue, mut queued) = tokio::sync::mpsc::unbounded_channel();
    let owned: Ref<String> = Ref::new(5, 3, Some(Owner::new(5, queue)));
    let bytes = rkyv::to_bytes::<rancor::Error>(&owned).unwrap();
    let decoded: Ref<String> = rkyv::from_bytes::<Ref<String>, rancor::Error>(&bytes).unwrap();
    assert!(decoded.owner().is_none());
    let clone = owned.clone();
    drop(owned);
    drop(decoded);
    assert!(queued.try_recv().is_err(), "a clone still holds it");
    drop(clone);
    assert!(matches!(queued.try_recv(), Ok(Queued::Free(5, None))));

    // Freed by hand: the drop says nothing more.
    let (queue, mut queued) = tokio::sync::mpsc::unbounded_channel();
    let owned: Ref<String> = Ref::new(6, 3, Some(Owner::new(6, queue)));
    owned.owner().unwrap().disarm();
    drop(owned);
    assert!(queued.try_recv().is_err());
}

#[test]
fn an_object_reads_back_in_place_and_bad_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<u64> = (0..10_000).collect();
    let fp = fingerprint::<Vec<u64>>();
    let (path, size) = write_in(&[dir.path().to_owned()], "obj-1", &values).unwrap();
    assert_eq!(size, std::fs::metadata(&path).unwrap().len());
    let mapped = Mapped::<Vec<u64>>::open(&path, object_id(1), fp).unwrap();
    assert_eq!(mapped.len(), 10_000);
    assert_eq!(mapped[9_999].to_native(), 9_999);
    assert_eq!(mapped.deserialize().unwrap(), values);
    // Nothing but the object is left: no temporary file.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // Another type: refused by its fingerprint, never misread.
    let other = fingerprint::<String>();
    assert!(matches!(
        Mapped::<String>::open(&path, object_id(1), other),
        Err(ObjectError::TypeMismatch { .. })
    ));
    // Cut short, or not an object at all: invalid, with the path.
    let whole = std::fs::read(&path).unwrap();
    let cut = dir.path().join("obj-2");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    assert!(matches!(
        Mapped::<Vec<u64>>::open(&cut, object_id(2), fp),
        Err(ObjectError::Invalid { path, .. }) if path == cut
    ));
    let garbage = dir.path().join("obj-3");
    std::fs::write(&garbage, b"not an object").unwrap();
    assert!(matches!(
        Mapped::<Vec<u64>>::open(&garbage, object_id(3), fp),
        Err(ObjectError::Invalid { .. })
    ));
    let missing = Mapped::<Vec<u64>>::open(&dir.path().join("obj-4"), object_id(4), fp);
    assert!(
        matches!(missing, Err(ObjectError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound)
    );
}

#[test]
fn a_store_that_cannot_be_written_is_passed_over_and_a_reader_looks_in_each() {
    let scratch = tempfile::tempdir().unwrap();
    let gone = scratch.path().join("no-such-memory");
    let dirs = [gone.clone(), scratch.path().to_owned()];
    let moved = "moved".to_owned();
    let (path, _) = write_in(&dirs, "obj-a", &moved).unwrap();
    assert_eq!(path, scratch.path().join("obj-a"));
    let object: Ref<String> = Ref::new(0xa, 0, None);
    let mapped = open_in(&dirs, "obj-a", &object).unwrap().unwrap();
    assert_eq!(mapped.deserialize().unwrap(), "moved");
    assert!(open_in(&dirs, "obj-b", &object).unwrap().is_none());
    assert!(matches!(
        write_in(&[gone], "obj-c", &moved),
        Err(ObjectError::Io { what: "write", .. })
    ));
}
