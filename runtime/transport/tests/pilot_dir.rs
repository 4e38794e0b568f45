//! The pilot directory on a real file system: modes, markers, credential files.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::TestPilot;
use saker_transport::credentials::CA_CERTIFICATE_FILE_NAME;
use saker_transport::pilot_dir::MARKER_FILE_NAME;
use saker_transport::roles::role_of;
use saker_transport::test_support::write_legacy_credentials;
use saker_transport::{CredentialError, Credentials, DirError, Outdated, PilotDir, Renewal, Role};

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_new_pilot_dir_is_private_and_every_secret_is_0600() {
    let pilot = TestPilot::new();
    let path = pilot.dir.path();
    assert_eq!(mode(path), 0o700);
    let mut names: Vec<String> = fs::read_dir(path)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "agent.key",
            "agent.pem",
            "ca.pem",
            "client.key",
            "client.pem",
            "root.key",
            "root.pem",
            MARKER_FILE_NAME,
        ],
        "no temporary files may be left behind, and no ca key"
    );
    for name in names {
        assert_eq!(mode(&path.join(&name)), 0o600, "{name}");
    }
}

#[test]
fn create_makes_missing_parents_and_open_finds_the_same_pilot() {
    let temporary = tempfile::tempdir().unwrap();
    let path = temporary.path().join("a/b/pilot");
    let created = PilotDir::create(&path).unwrap();
    let opened = PilotDir::open(&path).unwrap();
    assert_eq!(opened, created);
    assert_eq!(opened.pilot_id().to_string().len(), 32);
    assert_ne!(
        PilotDir::create(temporary.path().join("other"))
            .unwrap()
            .pilot_id(),
        created.pilot_id()
    );
}

#[test]
fn an_existing_private_directory_is_adopted_and_tightened() {
    let temporary = tempfile::tempdir().unwrap();
    let path = temporary.path().join("pilot");
    fs::create_dir(&path).unwrap();
    set_mode(&path, 0o755);
    PilotDir::create(&path).unwrap();
    assert_eq!(mode(&path), 0o700);
}

#[test]
fn an_existing_directory_writable_by_others_is_refused_untouched() {
    let temporary = tempfile::tempdir().unwrap();
    let path = temporary.path().join("pilot");
    fs::create_dir(&path).unwrap();
    set_mode(&path, 0o777);
    let error = PilotDir::create(&path).unwrap_err();
    assert!(
        matches!(error, DirError::WritableByOthers { mode: 0o777, .. }),
        "{error}"
    );
    assert_eq!(mode(&path), 0o777);
    assert!(!path.join(MARKER_FILE_NAME).exists());
}

#[test]
fn create_refuses_an_existing_pilot_and_a_file() {
    let pilot = TestPilot::new();
    let error = PilotDir::create(pilot.dir.path()).unwrap_err();
    assert!(
        matches!(error, DirError::AlreadyPilotDirectory { .. }),
        "{error}"
    );

    let file = pilot.dir.path().join("ca.pem");
    let error = PilotDir::create(&file).unwrap_err();
    assert!(matches!(error, DirError::NotADirectory { .. }), "{error}");
}

#[test]
fn opening_a_plain_directory_says_what_is_missing() {
    let temporary = tempfile::tempdir().unwrap();
    let error = PilotDir::open(temporary.path()).unwrap_err();
    assert!(
        matches!(error, DirError::NotPilotDirectory { .. }),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        format!(
            "{} is not a saker pilot directory: missing saker-pilot.json",
            temporary.path().display()
        )
    );

    let error = PilotDir::open(temporary.path().join("absent")).unwrap_err();
    assert!(matches!(error, DirError::NotFound { .. }), "{error}");
}

#[test]
fn open_refuses_a_pilot_dir_others_can_read() {
    let pilot = TestPilot::new();
    set_mode(pilot.dir.path(), 0o750);
    let error = PilotDir::open(pilot.dir.path()).unwrap_err();
    assert!(
        matches!(error, DirError::InsecurePermissions { mode: 0o750, .. }),
        "{error}"
    );
}

#[test]
fn open_rejects_corrupt_foreign_and_future_markers() {
    let pilot = TestPilot::new();
    let cases = [
        ("not json", "CorruptMarker"),
        (
            r#"{"format":"other","version":1,"pilot_id":"00000000000000000000000000000000"}"#,
            "ForeignMarker",
        ),
        (
            r#"{"format":"saker-pilot","version":2,"pilot_id":"00000000000000000000000000000000"}"#,
            "UnsupportedVersion",
        ),
        (
            r#"{"format":"saker-pilot","version":1,"pilot_id":"xyz"}"#,
            "CorruptPilotId",
        ),
    ];
    for (contents, expected) in cases {
        pilot
            .dir
            .write_secret_file(MARKER_FILE_NAME, contents.as_bytes())
            .unwrap();
        let error = PilotDir::open(pilot.dir.path()).unwrap_err();
        let name = match error {
            DirError::CorruptMarker { .. } => "CorruptMarker",
            DirError::ForeignMarker { .. } => "ForeignMarker",
            DirError::UnsupportedVersion { found: 2, .. } => "UnsupportedVersion",
            DirError::CorruptPilotId { .. } => "CorruptPilotId",
            ref other => panic!("unexpected {other:?}"),
        };
        assert_eq!(name, expected, "{contents}");
    }
}

#[test]
fn secret_files_replace_atomically_and_stay_inside_the_directory() {
    let pilot = TestPilot::new();
    let path = pilot.dir.write_secret_file("endpoint", b"first").unwrap();
    pilot.dir.write_secret_file("endpoint", b"second").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"second");
    assert_eq!(mode(&path), 0o600);
    for bad in ["", ".", "..", "../escape", "a/b"] {
        let error = pilot.dir.write_secret_file(bad, b"x").unwrap_err();
        assert!(matches!(error, DirError::InvalidFileName { .. }), "{bad:?}");
    }
}

#[test]
fn credentials_are_generated_once() {
    let pilot = TestPilot::new();
    let error = Credentials::generate_into(&pilot.dir).unwrap_err();
    assert!(
        matches!(&error, CredentialError::AlreadyExists { path } if path.ends_with(CA_CERTIFICATE_FILE_NAME)),
        "{error}"
    );
}

#[test]
fn every_role_loads_with_the_pilot_ca_as_its_only_root() {
    let pilot = TestPilot::new();
    for role in Role::ALL {
        let credentials = Credentials::load(&pilot.dir, role).unwrap();
        assert_eq!(credentials.role(), role);
        assert_eq!(credentials.certificate_chain().len(), 1);
        assert_eq!(credentials.roots().len(), 1);
    }
}

#[test]
fn broken_credential_files_are_named_in_the_error() {
    let pilot = TestPilot::new();
    let agent_key = pilot.dir.file_path("agent.key");

    fs::remove_file(&agent_key).unwrap();
    let error = Credentials::load(&pilot.dir, Role::Agent).unwrap_err();
    assert!(
        matches!(&error, CredentialError::Missing { path } if *path == agent_key),
        "{error}"
    );
    assert!(error.to_string().contains("agent.key"), "{error}");

    fs::copy(pilot.dir.file_path("client.key"), &agent_key).unwrap();
    let error = Credentials::load(&pilot.dir, Role::Agent).unwrap_err();
    assert!(
        matches!(error, CredentialError::KeyMismatch { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("agent.key") && error.to_string().contains("agent.pem"));

    pilot
        .dir
        .write_secret_file("root.pem", b"-----BEGIN CERTIFICATE-----\nnot base64!\n")
        .unwrap();
    let error = Credentials::load(&pilot.dir, Role::Root).unwrap_err();
    assert!(
        matches!(&error, CredentialError::Pem { path, .. } if path.ends_with("root.pem")),
        "{error}"
    );

    pilot.dir.write_secret_file("ca.pem", b"").unwrap();
    let error = Credentials::load(&pilot.dir, Role::Client).unwrap_err();
    assert!(
        matches!(&error, CredentialError::Pem { path, .. } if path.ends_with("ca.pem")),
        "{error}"
    );
}

#[test]
fn each_certificate_carries_its_role_and_load_checks_it() {
    let pilot = TestPilot::new();
    for role in Role::ALL {
        let credentials = Credentials::load(&pilot.dir, role).unwrap();
        assert_eq!(
            role_of(&credentials.certificate_chain()[0]).unwrap(),
            Some(role)
        );
    }
    // An agent's certificate and key put where the client's belong.
    for (from, to) in [("agent.pem", "client.pem"), ("agent.key", "client.key")] {
        fs::copy(pilot.dir.file_path(from), pilot.dir.file_path(to)).unwrap();
    }
    let error = Credentials::load(&pilot.dir, Role::Client).unwrap_err();
    assert!(
        matches!(
            &error,
            CredentialError::WrongRole { path, expected: Role::Client, found: Role::Agent }
                if path.ends_with("client.pem")
        ),
        "{error}"
    );
}

#[test]
fn credentials_without_roles_are_refused_by_load_and_renewed_for_a_resume() {
    let pilot = TestPilot::new();
    write_legacy_credentials(&pilot.dir);
    let old_ca = fs::read(pilot.dir.file_path(CA_CERTIFICATE_FILE_NAME)).unwrap();
    for role in Role::ALL {
        let error = Credentials::load(&pilot.dir, role).unwrap_err();
        assert!(
            matches!(&error, CredentialError::NoRole { path } if path.ends_with(role.certificate_file_name())),
            "{error}"
        );
        assert!(error.to_string().contains("older saker"), "{error}");
    }

    let renewal = Credentials::renew_if_outdated(&pilot.dir).unwrap();
    assert_eq!(renewal, Renewal::Renewed(Outdated::NoRoles));
    assert_ne!(
        fs::read(pilot.dir.file_path(CA_CERTIFICATE_FILE_NAME)).unwrap(),
        old_ca,
        "a new ca"
    );
    assert!(
        !pilot.dir.file_path("ca.key").exists(),
        "the old ca key is gone"
    );
    for role in Role::ALL {
        Credentials::load(&pilot.dir, role).unwrap();
    }
    // Current credentials are left as they are.
    let current = fs::read(pilot.dir.file_path("client.pem")).unwrap();
    assert_eq!(
        Credentials::renew_if_outdated(&pilot.dir).unwrap(),
        Renewal::Current
    );
    assert_eq!(
        fs::read(pilot.dir.file_path("client.pem")).unwrap(),
        current
    );
}

#[test]
fn an_interrupted_generation_is_completed_by_a_renewal() {
    let pilot = TestPilot::new();
    // A generation or renewal writes ca.pem last; one cut short leaves none.
    fs::remove_file(pilot.dir.file_path(CA_CERTIFICATE_FILE_NAME)).unwrap();
    assert_eq!(
        Credentials::renew_if_outdated(&pilot.dir).unwrap(),
        Renewal::Renewed(Outdated::Incomplete)
    );
    for role in Role::ALL {
        Credentials::load(&pilot.dir, role).unwrap();
    }
}

#[test]
fn broken_current_credentials_are_reported_not_renewed() {
    let pilot = TestPilot::new();
    let ca = fs::read(pilot.dir.file_path(CA_CERTIFICATE_FILE_NAME)).unwrap();
    fs::copy(
        pilot.dir.file_path("client.key"),
        pilot.dir.file_path("agent.key"),
    )
    .unwrap();
    let error = Credentials::renew_if_outdated(&pilot.dir).unwrap_err();
    assert!(
        matches!(error, CredentialError::KeyMismatch { .. }),
        "{error}"
    );
    assert_eq!(
        fs::read(pilot.dir.file_path(CA_CERTIFICATE_FILE_NAME)).unwrap(),
        ca
    );
}
