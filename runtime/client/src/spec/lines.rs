//! Many single-task jobs that differ only in their command: a task file's lines.
//!
//! A million lines sent as a million [`JobRequest`](super::JobRequest)s cost a million
//! specs to encode, parse, validate, journal and keep, each with its copy of the same
//! options. [`JobLines`] sends the options once (the *template*) and each job's command
//! line (and the environment variables it adds, if any) packed in one buffer. The root
//! validates the template once, queues one single-task job per command with
//! consecutive ids, journals the whole batch as one record, and builds a job's
//! definition only when a node first needs it. Each job means exactly what the
//! template with its command would mean as a [`TaskSpec`] ([`JobLines::spec`]).
//!
//! On the wire a command is a JSON array of strings (`["echo","a b"]`), or, when it
//! sets environment variables, an object `{"argv": [...], "env": {"K": "v"}}`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{SpecError, TaskSpec};

/// Single-task jobs sharing every option but their command (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobLines {
    /// The options of every job; its `argv` must be empty (each command brings its
    /// own). No `function`, `name`, `after`, `after_any`, `every`, `reads` or `writes`:
    /// such jobs go as ordinary requests.
    pub template: TaskSpec,
    /// As [`JobRequest::inline_output`](super::JobRequest::inline_output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_output: Option<u32>,
    /// One job per command, in order.
    pub commands: Commands,
}

/// Command lines packed in one buffer: each argument ends with a NUL (which no
/// argument may contain), and `ends[i]` is where command `i` ends. A few bytes per
/// command instead of a vector and a string per argument.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Commands {
    bytes: Vec<u8>,
    ends: Vec<u32>,
    /// Environment variables of the commands that add some, by command number.
    env: BTreeMap<u32, BTreeMap<String, String>>,
    /// The first argument that held a NUL (command, position): kept without its NULs,
    /// refused by [`JobLines::validate`] as the whole spec's check would refuse it.
    nul: Option<(u32, u32)>,
}

/// Why a batch of lines was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinesError {
    #[error("the template sets `{field}`, which lines cannot share; send such jobs whole")]
    TemplateField { field: &'static str },
    #[error("the template has an argv; each command brings its own")]
    TemplateArgv,
    #[error("no commands")]
    Empty,
    #[error("the template: {0}")]
    Template(SpecError),
    #[error("command {index}: {source}")]
    Command { index: usize, source: SpecError },
    #[error("the commands exceed 4 GiB")]
    TooLarge,
}

impl Commands {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a command; `env` adds to (or overrides) the template's environment.
    pub fn push<'a>(
        &mut self,
        argv: impl IntoIterator<Item = &'a str>,
        env: BTreeMap<String, String>,
    ) -> Result<(), LinesError> {
        let index = self.ends.len() as u32;
        for arg in argv {
            self.push_arg(arg);
        }
        self.end_command()?;
        if !env.is_empty() {
            self.env.insert(index, env);
        }
        Ok(())
    }

    fn push_arg(&mut self, arg: &str) {
        if arg.contains('\0') {
            if self.nul.is_none() {
                let start = self.ends.last().copied().unwrap_or(0) as usize;
                let position = self.bytes[start..].iter().filter(|&&b| b == 0).count();
                self.nul = Some((self.ends.len() as u32, position as u32));
            }
            self.bytes.extend(arg.bytes().filter(|&byte| byte != 0));
        } else {
            self.bytes.extend_from_slice(arg.as_bytes());
        }
        self.bytes.push(0);
    }

    fn end_command(&mut self) -> Result<(), LinesError> {
        let end = u32::try_from(self.bytes.len()).map_err(|_| LinesError::TooLarge)?;
        self.ends.push(end);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn range(&self, index: usize) -> &[u8] {
        let start = match index {
            0 => 0,
            _ => self.ends[index - 1] as usize,
        };
        &self.bytes[start..self.ends[index] as usize]
    }

    /// The arguments of command `index` (`index < len()`).
    pub fn argv(&self, index: usize) -> impl Iterator<Item = &str> {
        let range = self.range(index);
        // Pushed as `&str`s, split at the NULs pushed after each: valid UTF-8.
        range
            .split(|&byte| byte == 0)
            .take(range.iter().filter(|&&byte| byte == 0).count())
            .map(|arg| std::str::from_utf8(arg).unwrap_or_default())
    }

    /// The environment variables command `index` adds.
    pub fn env(&self, index: usize) -> Option<&BTreeMap<String, String>> {
        self.env.get(&(index as u32))
    }

    fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

impl JobLines {
    /// Checks the template once and each command as [`TaskSpec::validate`] would
    /// check the template with that command.
    pub fn validate(&self) -> Result<(), LinesError> {
        let template = &self.template;
        let field = if template.function.is_some() {
            Some("function")
        } else if template.name.is_some() {
            Some("name")
        } else if !template.after.is_empty() {
            Some("after")
        } else if !template.after_any.is_empty() {
            Some("after_any")
        } else if template.every.is_some() {
            Some("every")
        } else if !template.reads.is_empty() {
            Some("reads")
        } else if !template.writes.is_empty() {
            Some("writes")
        } else {
            None
        };
        if let Some(field) = field {
            return Err(LinesError::TemplateField { field });
        }
        if !template.argv.is_empty() {
            return Err(LinesError::TemplateArgv);
        }
        if self.commands.is_empty() {
            return Err(LinesError::Empty);
        }
        // The options, once: the template with a stand-in command.
        let mut options = template.clone();
        options.argv = vec!["x".to_owned()];
        options.validate().map_err(LinesError::Template)?;
        for index in 0..self.commands.len() {
            self.check_command(index)
                .map_err(|source| LinesError::Command { index, source })?;
        }
        Ok(())
    }

    /// The checks of [`TaskSpec::validate`] that depend on the command.
    fn check_command(&self, index: usize) -> Result<(), SpecError> {
        let range = self.commands.range(index);
        if range.is_empty() {
            return Err(SpecError::EmptyArgv);
        }
        let nul = match self.commands.nul {
            Some((command, position)) if command as usize == index => Some(position as usize),
            _ => None,
        };
        if let Some(position) = nul.filter(|&position| position == 0) {
            return Err(SpecError::NulInArgument { position });
        }
        if range[0] == 0 {
            return Err(SpecError::EmptyProgram);
        }
        if let Some(position) = nul {
            return Err(SpecError::NulInArgument { position });
        }
        let count = range.iter().filter(|&&byte| byte == 0).count();
        if self.template.shell && count != 1 {
            return Err(SpecError::ShellNeedsOneScript { count });
        }
        if let Some(env) = self.commands.env(index) {
            for (key, value) in env {
                super::validate_env(key, value)?;
            }
        }
        Ok(())
    }

    /// Job `index` as a whole spec: the template with its command and environment.
    pub fn spec(&self, index: usize) -> TaskSpec {
        let mut spec = self.template.clone();
        spec.argv = self.commands.argv(index).map(str::to_owned).collect();
        if let Some(env) = self.commands.env(index) {
            spec.env
                .extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        spec
    }

    pub fn len(&self) -> usize {
        self.commands.len()
    }

    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

/// A command with environment variables, as the wire writes it.
#[derive(Serialize)]
struct WithEnv<'a> {
    argv: Argv<'a>,
    env: &'a BTreeMap<String, String>,
}

struct Argv<'a>(&'a Commands, usize);

impl Serialize for Argv<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.argv(self.1))
    }
}

impl Serialize for Commands {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for index in 0..self.len() {
            match self.env(index) {
                None => seq.serialize_element(&Argv(self, index))?,
                Some(env) => seq.serialize_element(&WithEnv {
                    argv: Argv(self, index),
                    env,
                })?,
            }
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Commands {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct All;
        impl<'de> Visitor<'de> for All {
            type Value = Commands;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("an array of commands")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Commands, A::Error> {
                let mut commands = Commands::new();
                if let Some(hint) = seq.size_hint() {
                    commands.ends.reserve(hint);
                }
                while seq.next_element_seed(One(&mut commands))?.is_some() {}
                commands.shrink_to_fit();
                Ok(commands)
            }
        }
        deserializer.deserialize_seq(All)
    }
}

/// Reads one command straight into the buffer: no vector or string per argument.
struct One<'c>(&'c mut Commands);

impl<'de> DeserializeSeed<'de> for One<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for One<'_> {
    type Value = ();
    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a command: an array of strings, or {\"argv\": [...], \"env\": {...}}")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Arg(self.0))?.is_some() {}
        self.0.end_command().map_err(de::Error::custom)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let index = self.0.len() as u32;
        let mut argv = false;
        let mut env = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match &*key {
                "argv" if !argv => {
                    map.next_value_seed(ArgvSeed(self.0))?;
                    argv = true;
                }
                "env" if env.is_none() => env = Some(map.next_value::<BTreeMap<String, String>>()?),
                "argv" | "env" => {
                    return Err(de::Error::custom(format!("duplicate field `{key}`")));
                }
                other => return Err(de::Error::unknown_field(other, &["argv", "env"])),
            }
        }
        if !argv {
            return Err(de::Error::missing_field("argv"));
        }
        if let Some(env) = env.filter(|env| !env.is_empty()) {
            self.0.env.insert(index, env);
        }
        Ok(())
    }
}

struct ArgvSeed<'c>(&'c mut Commands);

impl<'de> DeserializeSeed<'de> for ArgvSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        struct Seq<'c>(&'c mut Commands);
        impl<'de> Visitor<'de> for Seq<'_> {
            type Value = ();
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("an array of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
                while seq.next_element_seed(Arg(self.0))?.is_some() {}
                self.0.end_command().map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_seq(Seq(self.0))
    }
}

struct Arg<'c>(&'c mut Commands);

impl<'de> DeserializeSeed<'de> for Arg<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Arg<'_> {
    type Value = ();
    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, arg: &str) -> Result<(), E> {
        self.0.push_arg(arg);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(commands: &[&[&str]]) -> JobLines {
        let mut packed = Commands::new();
        for argv in commands {
            packed.push(argv.iter().copied(), BTreeMap::new()).unwrap();
        }
        JobLines {
            template: TaskSpec::new(Vec::new()),
            inline_output: None,
            commands: packed,
        }
    }

    #[test]
    fn commands_round_trip_through_json_as_arrays_and_objects() {
        let mut batch = lines(&[&["/bin/true"], &["echo", "a b", ""]]);
        let env = BTreeMap::from([("K".to_owned(), "v".to_owned())]);
        batch.commands.push(["env"], env.clone()).unwrap();
        let json = serde_json::to_string(&batch.commands).unwrap();
        assert_eq!(
            json,
            r#"[["/bin/true"],["echo","a b",""],{"argv":["env"],"env":{"K":"v"}}]"#
        );
        let back: Commands = serde_json::from_str(&json).unwrap();
        assert_eq!(back, batch.commands);
        assert_eq!(back.argv(1).collect::<Vec<_>>(), ["echo", "a b", ""]);
        assert_eq!(back.env(2), Some(&env));
        assert_eq!(back.env(0), None);
        // Escapes decode into the buffer too.
        let escaped: Commands = serde_json::from_str(r#"[["a\"b","\u00e9"]]"#).unwrap();
        assert_eq!(escaped.argv(0).collect::<Vec<_>>(), ["a\"b", "é"]);
    }

    #[test]
    fn bad_commands_on_the_wire_are_refused() {
        for json in [
            r#"[[1]]"#,
            r#"["x"]"#,
            r#"[{"env":{}}]"#,
            r#"[{"argv":["a"],"cwd":"/"}]"#,
            r#"[{"argv":["a"],"argv":["b"]}]"#,
            r#"{}"#,
        ] {
            assert!(serde_json::from_str::<Commands>(json).is_err(), "{json}");
        }
    }

    #[test]
    fn each_command_is_checked_as_its_spec_would_be() {
        assert!(lines(&[&["/bin/true"], &["a", "", ""]]).validate().is_ok());
        let checks = [
            (lines(&[&["a"], &[]]), SpecError::EmptyArgv),
            (lines(&[&["a"], &["", "x"]]), SpecError::EmptyProgram),
            (
                lines(&[&["a"], &["x", "b\0c"]]),
                SpecError::NulInArgument { position: 1 },
            ),
            (
                lines(&[&["a"], &["\0x"]]),
                SpecError::NulInArgument { position: 0 },
            ),
        ];
        for (batch, expected) in checks {
            // The packed check agrees with the whole spec's (NULs are not kept).
            if !matches!(expected, SpecError::NulInArgument { .. }) {
                assert_eq!(batch.spec(1).validate(), Err(expected.clone()));
            }
            assert_eq!(
                batch.validate(),
                Err(LinesError::Command {
                    index: 1,
                    source: expected
                })
            );
        }
        let mut shell = lines(&[&["echo a"], &["echo", "b"]]);
        shell.template.shell = true;
        assert!(matches!(
            shell.validate(),
            Err(LinesError::Command {
                index: 1,
                source: SpecError::ShellNeedsOneScript { count: 2 }
            })
        ));
        let mut bad_env = lines(&[&["a"]]);
        bad_env
            .commands
            .push(["b"], BTreeMap::from([("A=B".to_owned(), "v".to_owned())]))
            .unwrap();
        assert!(matches!(
            bad_env.validate(),
            Err(LinesError::Command { index: 1, .. })
        ));
    }

    #[test]
    fn templates_that_lines_cannot_share_are_refused() {
        let mut named = lines(&[&["a"]]);
        named.template.name = Some("n".into());
        assert_eq!(
            named.validate(),
            Err(LinesError::TemplateField { field: "name" })
        );
        let mut argv = lines(&[&["a"]]);
        argv.template.argv = vec!["x".into()];
        assert_eq!(argv.validate(), Err(LinesError::TemplateArgv));
        assert_eq!(lines(&[]).validate(), Err(LinesError::Empty));
    }

    #[test]
    fn a_line_means_its_whole_spec() {
        let mut batch = lines(&[&["a"]]);
        batch.template.env.insert("A".into(), "1".into());
        batch.template.priority = 4;
        batch
            .commands
            .push(
                ["b", "c"],
                BTreeMap::from([("B".to_owned(), "2".to_owned())]),
            )
            .unwrap();
        let spec = batch.spec(1);
        assert_eq!(spec.argv, ["b", "c"]);
        assert_eq!(spec.priority, 4);
        assert_eq!(spec.env.len(), 2);
        assert_eq!(batch.spec(0).env.len(), 1);
    }
}
