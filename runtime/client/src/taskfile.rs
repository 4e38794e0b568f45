//! Task files for `saker run FILE` and `saker submit FILE`: one task per line.
//!
//! A line is split into words the way a POSIX shell would (quotes, backslashes,
//! trailing `# comments`, via `shell-words`) and executed directly, **without a
//! shell**. Leading `NAME=value` words become environment overrides, as in a shell.
//! Syntax that only a shell can honour — `| & ; < > ( )`, `` ` ``, `$NAME`, `$(…)`,
//! an unquoted `*` or a word-leading `~` — is refused with a `FILE:LINE` error rather
//! than silently passed on as a literal argument; write such a line as
//! `sh -c '…'` (or `bash -c '…'`), which is then an ordinary command whose program
//! happens to be a shell. Such a line (`sh`, `bash`, `dash`, `zsh` or `ksh` with a
//! `-c`-style flag) is not checked for shell syntax: its script is passed to that
//! shell verbatim, so `bash -c "echo $HOME"` expands `$HOME` once, in bash. Unquoted
//! `?` and `[` stay literal.
//!
//! Blank lines and lines starting with `#` are skipped. A line starting with `{` is a
//! complete JSON [`TaskSpec`]: fields it leaves out take the spec defaults, not the
//! CLI options, so a JSON line means exactly what it says.
//!
//! [`TaskFile`] is an iterator that reads one line at a time into a reused buffer, so
//! a file of millions of lines streams in constant memory. An invalid line yields an
//! error and the iterator carries on with the next line; a read error ends it.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::spec::{SpecDefaults, SpecError, TaskSpec};

/// One task read from a task file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskLine {
    /// 1-based line number, for messages about this task.
    pub line: u64,
    /// Validated.
    pub spec: TaskSpec,
}

/// Streams the tasks of a task file; see the module documentation for the syntax.
#[derive(Debug)]
pub struct TaskFile<R> {
    reader: R,
    path: PathBuf,
    defaults: SpecDefaults,
    line_number: u64,
    buffer: Vec<u8>,
    finished: bool,
}

impl TaskFile<BufReader<File>> {
    /// Opens `path`; plain lines take `defaults` (the CLI options).
    pub fn open(path: &Path, defaults: SpecDefaults) -> Result<Self, TaskFileError> {
        let file = File::open(path).map_err(|source| TaskFileError {
            path: path.to_owned(),
            line: None,
            kind: TaskFileErrorKind::Open(source),
        })?;
        Ok(Self::from_reader(
            BufReader::with_capacity(1 << 16, file),
            path,
            defaults,
        ))
    }
}

impl<R: BufRead> TaskFile<R> {
    /// Reads task lines from `reader` (e.g. stdin); `path` is only used in messages.
    pub fn from_reader(reader: R, path: &Path, defaults: SpecDefaults) -> Self {
        TaskFile {
            reader,
            path: path.to_owned(),
            defaults,
            line_number: 0,
            buffer: Vec::with_capacity(256),
            finished: false,
        }
    }

    fn error(&self, kind: TaskFileErrorKind) -> TaskFileError {
        TaskFileError {
            path: self.path.clone(),
            line: Some(self.line_number),
            kind,
        }
    }
}

/// One task read from a task file, as [`TaskFile::next_item`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskItem {
    /// A plain line: the defaults with this command and these added variables.
    Command {
        argv: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// A JSON line: exactly this spec.
    Spec(Box<TaskSpec>),
}

impl<R: BufRead> TaskFile<R> {
    /// The next task without building a whole spec for a plain line (the defaults
    /// are the same for all of them): what `saker submit` sends as `submit_lines`.
    pub fn next_item(&mut self) -> Option<Result<(u64, TaskItem), TaskFileError>> {
        while !self.finished {
            self.buffer.clear();
            self.line_number += 1;
            match self.reader.read_until(b'\n', &mut self.buffer) {
                Ok(0) => self.finished = true,
                Ok(_) => {
                    let mut bytes = self.buffer.as_slice();
                    if self.line_number == 1 {
                        bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
                    }
                    let parsed = match std::str::from_utf8(bytes) {
                        Ok(text) => parse_item(text),
                        Err(_) => Err(TaskFileErrorKind::InvalidUtf8),
                    };
                    match parsed {
                        Ok(None) => continue,
                        Ok(Some(item)) => return Some(Ok((self.line_number, item))),
                        Err(kind) => return Some(Err(self.error(kind))),
                    }
                }
                Err(source) => {
                    self.finished = true;
                    return Some(Err(self.error(TaskFileErrorKind::Read(source))));
                }
            }
        }
        None
    }
}

impl<R: BufRead> Iterator for TaskFile<R> {
    type Item = Result<TaskLine, TaskFileError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (line, item) = match self.next_item()? {
            Ok(read) => read,
            Err(error) => return Some(Err(error)),
        };
        Some(match item_spec(item, &self.defaults) {
            Ok(spec) => Ok(TaskLine { line, spec }),
            Err(kind) => Err(self.error(kind)),
        })
    }
}

/// Parses one task-file line: `Ok(None)` for a blank or comment line. Exposed for
/// `saker submit -- CMD…`-style single lines.
pub fn parse_line(
    line: &str,
    defaults: &SpecDefaults,
) -> Result<Option<TaskSpec>, TaskFileErrorKind> {
    match parse_item(line)? {
        None => Ok(None),
        Some(item) => item_spec(item, defaults).map(Some),
    }
}

/// The whole spec of a task read from a file: a JSON line's as it is (checked when
/// read), a command with the defaults, checked here.
fn item_spec(item: TaskItem, defaults: &SpecDefaults) -> Result<TaskSpec, TaskFileErrorKind> {
    match item {
        TaskItem::Spec(spec) => Ok(*spec),
        TaskItem::Command { argv, env } => {
            let mut spec = defaults.to_spec(argv);
            spec.env.extend(env);
            spec.validate().map_err(TaskFileErrorKind::InvalidSpec)?;
            Ok(spec)
        }
    }
}

/// Parses one line into a command or a spec; a JSON spec is validated, a command
/// only as far as the line goes (the defaults it runs with are checked once).
fn parse_item(line: &str) -> Result<Option<TaskItem>, TaskFileErrorKind> {
    let text = line.trim();
    if text.is_empty() || text.starts_with('#') {
        return Ok(None);
    }
    if text.starts_with('{') {
        let spec = serde_json::from_str::<TaskSpec>(text).map_err(|error| {
            TaskFileErrorKind::InvalidJson(crate::codec::describe_body_error(text, &error))
        })?;
        spec.validate().map_err(TaskFileErrorKind::InvalidSpec)?;
        return Ok(Some(TaskItem::Spec(Box::new(spec))));
    }
    // Most lines are plain words: split them without the general splitter.
    let mut words = match simple_words(text) {
        Some(words) => words,
        None => shell_words::split(text).map_err(|_| TaskFileErrorKind::UnterminatedQuote)?,
    };
    let assignments = words
        .iter()
        .take_while(|word| env_assignment(word).is_some())
        .count();
    let env = words
        .drain(..assignments)
        .filter_map(|word| {
            env_assignment(&word).map(|(name, value)| (name.to_owned(), value.to_owned()))
        })
        .collect::<BTreeMap<_, _>>();
    let argv = words;
    if argv.is_empty() {
        return Err(TaskFileErrorKind::NoCommand);
    }
    // A line that runs a shell itself asked for shell syntax in its script.
    if !runs_shell_script(&argv)
        && let Some(syntax) = find_shell_syntax(text)
    {
        return Err(TaskFileErrorKind::NeedsShell { syntax });
    }
    Ok(Some(TaskItem::Command { argv, env }))
}

/// The words of a line with no quote, backslash or comment: split at blanks.
fn simple_words(text: &str) -> Option<Vec<String>> {
    if text.contains(['\'', '"', '\\', '#', '\n']) {
        return None;
    }
    Some(
        text.split([' ', '\t'])
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// `sh -c …`, `bash -lc …` and the like: the line's program is a shell given a script.
fn runs_shell_script(argv: &[String]) -> bool {
    let program = argv[0].rsplit('/').next().unwrap_or_default();
    let is_shell = matches!(program, "sh" | "bash" | "dash" | "zsh" | "ksh");
    let has_script_flag = argv
        .get(1)
        .is_some_and(|flag| flag.starts_with('-') && !flag.starts_with("--") && flag.contains('c'));
    is_shell && has_script_flag
}

/// `NAME=value` with a shell variable name, as a leading word of a command.
fn env_assignment(word: &str) -> Option<(&str, &str)> {
    let (name, value) = word.split_once('=')?;
    let mut characters = name.chars();
    let first = characters.next()?;
    let valid = (first.is_ascii_alphabetic() || first == '_')
        && characters.all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some((name, value))
}

/// The first piece of unquoted syntax that only a shell would interpret.
fn find_shell_syntax(line: &str) -> Option<String> {
    #[derive(Clone, Copy, PartialEq)]
    enum Quote {
        None,
        Single,
        Double,
    }
    let expands = |next: Option<char>| {
        next.is_some_and(|c| c.is_ascii_alphanumeric() || "_{(?!#@*$-".contains(c))
    };
    let mut quote = Quote::None;
    let mut word_start = true;
    let mut characters = line.chars().peekable();
    while let Some(c) = characters.next() {
        let at_word_start = std::mem::replace(&mut word_start, false);
        match (quote, c) {
            (Quote::Single, '\'') => quote = Quote::None,
            (Quote::Single, _) => {}
            (_, '\\') => {
                characters.next();
            }
            (Quote::Double, '"') => quote = Quote::None,
            (_, '`') => return Some("`".to_owned()),
            (_, '$') if expands(characters.peek().copied()) => {
                let mut syntax = String::from('$');
                syntax.extend(characters.next());
                return Some(syntax);
            }
            (Quote::Double, _) => {}
            (Quote::None, '\'') => quote = Quote::Single,
            (Quote::None, '"') => quote = Quote::Double,
            (Quote::None, ' ' | '\t') => word_start = true,
            (Quote::None, '#') if at_word_start => return None,
            (Quote::None, '~') if at_word_start => return Some("~".to_owned()),
            (Quote::None, '|' | '&' | ';' | '<' | '>' | '(' | ')' | '*') => {
                let mut syntax = String::from(c);
                if let Some(&next) = characters.peek()
                    && matches!((c, next), ('|', '|') | ('&', '&') | ('>', '>') | ('<', '<'))
                {
                    syntax.push(next);
                }
                return Some(syntax);
            }
            (Quote::None, _) => {}
        }
    }
    None
}

/// A task file that cannot be read, or one of its lines that is not a valid task.
/// Displays as `FILE:LINE: why`; the underlying cause (JSON or spec error) is the
/// [`source`](std::error::Error::source).
#[derive(Debug)]
pub struct TaskFileError {
    pub path: PathBuf,
    /// 1-based; `None` when the file could not be opened.
    pub line: Option<u64>,
    pub kind: TaskFileErrorKind,
}

impl fmt::Display for TaskFileError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(formatter, ":{line}")?;
        }
        write!(formatter, ": {}", self.kind)
    }
}

impl std::error::Error for TaskFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.kind)
    }
}

/// Why a task file or line was refused.
#[derive(Debug, thiserror::Error)]
pub enum TaskFileErrorKind {
    #[error("cannot open task file")]
    Open(#[source] io::Error),
    #[error("cannot read task file")]
    Read(#[source] io::Error),
    #[error("line is not valid UTF-8")]
    InvalidUtf8,
    #[error("unterminated quote")]
    UnterminatedQuote,
    #[error("`{syntax}` needs a shell, which task lines do not run; write the line as sh -c '…'")]
    NeedsShell { syntax: String },
    #[error("environment assignments without a command")]
    NoCommand,
    /// Which field, and why, without the parser's line and column (the file's line
    /// number is the error's).
    #[error("invalid JSON task spec: {0}")]
    InvalidJson(String),
    #[error("invalid task")]
    InvalidSpec(#[source] SpecError),
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::time::Duration;

    use super::*;

    fn parse(text: &str) -> Vec<Result<TaskLine, TaskFileError>> {
        TaskFile::from_reader(
            Cursor::new(text.as_bytes().to_vec()),
            Path::new("tasks.txt"),
            SpecDefaults::default(),
        )
        .collect()
    }

    fn argv(line: &str) -> Vec<String> {
        parse_line(line, &SpecDefaults::default())
            .unwrap_or_else(|error| panic!("{line:?}: {error}"))
            .expect("a command line")
            .argv
    }

    fn refusal(line: &str) -> TaskFileErrorKind {
        parse_line(line, &SpecDefaults::default()).expect_err(line)
    }

    #[test]
    fn lines_split_like_a_shell() {
        assert_eq!(argv("echo hello world"), ["echo", "hello", "world"]);
        assert_eq!(
            argv("  echo   'a b'  \"c d\" e\\ f "),
            ["echo", "a b", "c d", "e f"]
        );
        assert_eq!(argv("echo a # trailing comment"), ["echo", "a"]);
        assert_eq!(
            argv("echo 'a|b' \"x > y\" '$HOME'"),
            ["echo", "a|b", "x > y", "$HOME"]
        );
        assert_eq!(argv("echo a\\|b cost=\\$5"), ["echo", "a|b", "cost=$5"]);
        assert_eq!(argv("echo a#b what?"), ["echo", "a#b", "what?"]);
        assert_eq!(
            argv("awk '{print $1}' in.txt"),
            ["awk", "{print $1}", "in.txt"]
        );
    }

    #[test]
    fn explicit_shell_lines_are_plain_commands() {
        assert_eq!(
            argv("sh -c 'grep x in | wc -l > out'"),
            ["sh", "-c", "grep x in | wc -l > out"]
        );
        assert_eq!(argv("bash -c \"echo $HOME\""), ["bash", "-c", "echo $HOME"]);
        assert_eq!(
            argv("A=1 /bin/bash -lc 'a && b'"),
            ["/bin/bash", "-lc", "a && b"]
        );
        // Not a script flag: the shell syntax is still refused.
        assert!(matches!(
            refusal("bash --norc x | y"),
            TaskFileErrorKind::NeedsShell { .. }
        ));
    }

    #[test]
    fn shell_only_syntax_is_refused() {
        for (line, syntax) in [
            ("grep x in | wc", "|"),
            ("a && b", "&&"),
            ("run > out.txt", ">"),
            ("run >> out.txt", ">>"),
            ("sleep 1 &", "&"),
            ("a; b", ";"),
            ("echo $HOME", "$H"),
            ("echo \"$HOME\"", "$H"),
            ("echo $(date)", "$("),
            ("echo `date`", "`"),
            ("ls *.txt", "*"),
            ("ls ~/data", "~"),
        ] {
            match refusal(line) {
                TaskFileErrorKind::NeedsShell { syntax: found } => {
                    assert_eq!(found, syntax, "{line}")
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn leading_assignments_become_environment() {
        let spec = parse_line("OMP_NUM_THREADS=4 A_1= ./sim x=1", &SpecDefaults::default())
            .unwrap()
            .unwrap();
        assert_eq!(spec.argv, ["./sim", "x=1"]);
        assert_eq!(spec.env["OMP_NUM_THREADS"], "4");
        assert_eq!(spec.env["A_1"], "");
        assert!(matches!(refusal("A=1 B=2"), TaskFileErrorKind::NoCommand));
    }

    #[test]
    fn defaults_apply_to_plain_lines_but_not_json_lines() {
        let mut defaults = SpecDefaults {
            cores: 4,
            priority: 9,
            max_retries: 2,
            time_limit: Some(Duration::from_secs(60)),
            tags: vec!["batch".to_owned()],
            ..SpecDefaults::default()
        };
        defaults.add_env_assignment("MODE=fast").unwrap();
        let text = "run a\n{\"argv\": [\"run\", \"b\"], \"cores\": 2}\n";
        let lines: Vec<TaskLine> =
            TaskFile::from_reader(Cursor::new(text), Path::new("t"), defaults.clone())
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(
            lines[0].spec,
            defaults.to_spec(vec!["run".into(), "a".into()])
        );
        assert_eq!(lines[1].spec.cores, 2);
        assert_eq!(lines[1].spec.priority, 0);
        assert!(lines[1].spec.env.is_empty());
    }

    #[test]
    fn blank_and_comment_lines_are_skipped_with_line_numbers_kept() {
        let lines = parse("\u{feff}# header\n\n   \n  # indented comment\r\necho 1\r\n\necho 2");
        let lines: Vec<TaskLine> = lines.into_iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            (lines[0].line, lines[0].spec.argv.as_slice()),
            (5, &["echo".to_owned(), "1".to_owned()][..])
        );
        assert_eq!(lines[1].line, 7);
    }

    #[test]
    fn errors_name_file_and_line_and_parsing_continues() {
        let results = parse("echo ok\necho 'open\n{\"argv\": []}\n{not json\nx | y\necho fine\n");
        let messages: Vec<String> = results
            .iter()
            .filter_map(|result| result.as_ref().err().map(ToString::to_string))
            .collect();
        assert_eq!(
            messages,
            [
                "tasks.txt:2: unterminated quote",
                "tasks.txt:3: invalid task",
                "tasks.txt:4: invalid JSON task spec: key must be a string",
                "tasks.txt:5: `|` needs a shell, which task lines do not run; write the line as sh -c '…'",
            ]
        );
        let invalid = results[2].as_ref().unwrap_err();
        let cause = std::error::Error::source(invalid).expect("spec error as the source");
        assert_eq!(cause.to_string(), SpecError::EmptyArgv.to_string());
        assert_eq!(results.last().unwrap().as_ref().unwrap().line, 6);
    }

    #[test]
    fn a_bad_json_line_names_its_field_not_the_parsers_position() {
        let results = parse("{\"argv\": [\"true\"], \"time_limit\": \"5 parsecs\"}\n");
        let message = results[0].as_ref().unwrap_err().to_string();
        assert!(
            message.starts_with("tasks.txt:1: invalid JSON task spec: time_limit: "),
            "{message}"
        );
        assert!(message.contains("5 parsecs"), "{message}");
        assert!(!message.contains("column"), "{message}");
    }

    #[test]
    fn invalid_utf8_is_a_line_error() {
        let bytes = b"echo a\necho \xff\xfe\necho b\n".to_vec();
        let results: Vec<_> =
            TaskFile::from_reader(Cursor::new(bytes), Path::new("f"), SpecDefaults::default())
                .collect();
        assert_eq!(results.len(), 3);
        assert_eq!(
            results[1].as_ref().unwrap_err().to_string(),
            "f:2: line is not valid UTF-8"
        );
    }

    #[test]
    fn missing_file_error_has_no_line() {
        let error = TaskFile::open(Path::new("/nonexistent/tasks.txt"), SpecDefaults::default())
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "/nonexistent/tasks.txt: cannot open task file"
        );
        assert!(std::error::Error::source(&error).is_some());
    }

    #[test]
    fn a_large_file_streams() {
        let count = 50_000;
        let mut text = String::with_capacity(count * 24);
        for index in 0..count {
            text.push_str(&format!("./simulate --seed {index} 'out {index}'\n"));
        }
        let mut seen = 0;
        for (position, line) in TaskFile::from_reader(
            Cursor::new(text.into_bytes()),
            Path::new("big"),
            SpecDefaults::default(),
        )
        .enumerate()
        {
            let line = line.unwrap();
            assert_eq!(line.spec.argv[2], position.to_string());
            seen += 1;
        }
        assert_eq!(seen, count);
    }
}
