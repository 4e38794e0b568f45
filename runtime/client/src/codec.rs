//! Line framing and message envelopes, shared by the server and the client.
//!
//! [`LineReader`] reads newline-terminated lines with a hard length limit, so a peer
//! can never make us buffer more than the limit. [`parse_envelope`] splits a message
//! into its `id`, its one message key and the raw JSON of the body, without parsing
//! the body: the body is parsed by type afterwards, so an error in it can still be
//! answered with the request's id. [`encode`] writes a message line.

use std::fmt;

use serde::Serialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use super::protocol::RequestId;

/// Default maximum length of one line (one message), newline excluded.
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;

/// Reads lines of at most `max_line_bytes` bytes (newline excluded).
#[derive(Debug)]
pub struct LineReader<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    max_line_bytes: usize,
    /// `line` holds a complete line already returned; clear it before reading on.
    returned: bool,
}

/// Why no line could be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadLineError {
    #[error("line longer than {max_line_bytes} bytes")]
    TooLong { max_line_bytes: usize },
    #[error("cannot read from the connection")]
    Io(#[source] std::io::Error),
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(reader: R, max_line_bytes: usize) -> Self {
        LineReader {
            reader: BufReader::with_capacity(64 << 10, reader),
            line: Vec::new(),
            max_line_bytes,
            returned: false,
        }
    }

    /// The next non-empty line without its newline, or `None` at end of stream. A
    /// final line without a newline counts as a line.
    ///
    /// Cancel safe: bytes consumed from the stream are kept in `self` until a whole
    /// line has been returned.
    pub async fn next_line(&mut self) -> Result<Option<&[u8]>, ReadLineError> {
        loop {
            if std::mem::take(&mut self.returned) {
                self.line.clear();
            }
            let available = self.reader.fill_buf().await.map_err(ReadLineError::Io)?;
            if available.is_empty() {
                if self.line.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                self.returned = true;
                return Ok(Some(&self.line));
            }
            let newline = available.iter().position(|&byte| byte == b'\n');
            let taken = newline.unwrap_or(available.len());
            if self.line.len() + taken > self.max_line_bytes {
                return Err(ReadLineError::TooLong {
                    max_line_bytes: self.max_line_bytes,
                });
            }
            self.line.extend_from_slice(&available[..taken]);
            match newline {
                Some(position) => {
                    self.reader.consume(position + 1);
                    self.returned = true;
                    if self.line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    return Ok(Some(&self.line));
                }
                None => self.reader.consume(taken),
            }
        }
    }
}

/// A message split into its parts; the body is still unparsed JSON text.
#[derive(Debug)]
pub struct Envelope<'a> {
    pub id: Option<RequestId>,
    /// The message key (`"submit"`, `"ok"`…), if there was one.
    pub name: Option<String>,
    pub body: Option<&'a RawValue>,
    /// A second message key, which makes the message malformed.
    pub extra_name: Option<String>,
}

/// Splits a JSON object line into id, message key and raw body.
pub fn parse_envelope(line: &[u8]) -> Result<Envelope<'_>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(line);
    let envelope = (&mut deserializer).deserialize_map(EnvelopeVisitor)?;
    deserializer.end()?;
    Ok(envelope)
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON object with an optional \"id\" and one message key")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut envelope = Envelope {
            id: None,
            name: None,
            body: None,
            extra_name: None,
        };
        while let Some(key) = map.next_key::<String>()? {
            if key == "id" {
                if envelope.id.is_some() {
                    return Err(de::Error::duplicate_field("id"));
                }
                envelope.id = map.next_value::<Option<u64>>()?.map(RequestId);
            } else {
                let body = map.next_value::<&'de RawValue>()?;
                if envelope.name.is_none() {
                    envelope.name = Some(key);
                    envelope.body = Some(body);
                } else if envelope.extra_name.is_none() {
                    envelope.extra_name = Some(key);
                }
            }
        }
        Ok(envelope)
    }
}

/// Why a request body does not fit its request, for a person: the path of the value
/// at fault and serde's message without its position (`jobs[0].spec.time_limit:
/// invalid duration "5 parsecs": expected e.g. "90s", …`), rather than `… at line 1
/// column 45`, which means nothing to whoever wrote the option.
pub fn describe_body_error(body: &str, error: &serde_json::Error) -> String {
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    let message = text.strip_suffix(&position).unwrap_or(&text);
    if error.line() == 0 {
        return message.to_owned();
    }
    // Byte offset of the position (serde counts columns in bytes, from 1).
    let offset = body
        .split_inclusive('\n')
        .take(error.line() - 1)
        .map(str::len)
        .sum::<usize>()
        + error.column();
    match json_path_at(body.as_bytes(), offset.min(body.len())) {
        path if path.is_empty() => message.to_owned(),
        path => format!("{path}: {message}"),
    }
}

/// The path (`jobs[0].spec.time_limit`) of the value being read at byte `offset` of
/// valid JSON text: the keys and array indices of the containers still open there,
/// and the last key read in the innermost object.
fn json_path_at(text: &[u8], offset: usize) -> String {
    enum Frame {
        Object {
            key: Option<String>,
            expect_key: bool,
        },
        Array {
            index: usize,
        },
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < offset {
        match text[i] {
            b'{' => stack.push(Frame::Object {
                key: None,
                expect_key: true,
            }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { expect_key, .. }) => *expect_key = true,
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            b':' => {
                if let Some(Frame::Object { expect_key, .. }) = stack.last_mut() {
                    *expect_key = false;
                }
            }
            b'"' => {
                let start = i + 1;
                let mut end = start;
                while end < text.len() && text[end] != b'"' {
                    end += if text[end] == b'\\' { 2 } else { 1 };
                }
                if let Some(Frame::Object { key, expect_key }) = stack.last_mut()
                    && *expect_key
                {
                    let raw = &text[start..end.min(text.len())];
                    *key = Some(
                        serde_json::from_slice::<String>(&text[i..(end + 1).min(text.len())])
                            .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned()),
                    );
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    let mut path = String::new();
    for frame in &stack {
        match frame {
            Frame::Object { key: Some(key), .. } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Frame::Object { key: None, .. } => {}
            Frame::Array { index } => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// One message line: `{"id":ID,"NAME":BODY}\n`, or `{"NAME":BODY}\n` without an id.
pub fn encode(
    id: Option<RequestId>,
    name: &str,
    body: &impl Serialize,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = Vec::with_capacity(128);
    line.push(b'{');
    if let Some(id) = id {
        line.extend_from_slice(format!("\"id\":{id},").as_bytes());
    }
    serde_json::to_writer(&mut line, name)?;
    line.push(b':');
    serde_json::to_writer(&mut line, body)?;
    line.extend_from_slice(b"}\n");
    Ok(line)
}

/// `encode` with a `null` id: for errors about a line whose id could not be read.
pub fn encode_with_null_id(
    name: &str,
    body: &impl Serialize,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = encode(None, name, body)?;
    line.splice(1..1, *b"\"id\":null,");
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_split_and_blank_lines_skipped() {
        let input: &[u8] = b"one\n\n  \ntwo\r\nthree";
        let mut reader = LineReader::new(input, 100);
        assert_eq!(reader.next_line().await.unwrap(), Some(&b"one"[..]));
        assert_eq!(reader.next_line().await.unwrap(), Some(&b"two\r"[..]));
        assert_eq!(reader.next_line().await.unwrap(), Some(&b"three"[..]));
        assert_eq!(reader.next_line().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_an_error_even_across_reads() {
        let (mut writer, reader) = tokio::io::duplex(4);
        let feed = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = writer.write_all(b"12345\n123456789012\n").await;
        });
        let mut reader = LineReader::new(reader, 10);
        assert_eq!(reader.next_line().await.unwrap(), Some(&b"12345"[..]));
        assert!(matches!(
            reader.next_line().await,
            Err(ReadLineError::TooLong { max_line_bytes: 10 })
        ));
        drop(reader);
        feed.await.unwrap();
    }

    #[test]
    fn envelopes_keep_the_id_when_the_body_is_wrong() {
        let envelope = parse_envelope(br#"{"submit": {"jobs": 5}, "id": 9}"#).unwrap();
        assert_eq!(envelope.id, Some(RequestId(9)));
        assert_eq!(envelope.name.as_deref(), Some("submit"));
        assert_eq!(envelope.body.unwrap().get(), r#"{"jobs": 5}"#);
        let two = parse_envelope(br#"{"id": 1, "status": {}, "wait": {}}"#).unwrap();
        assert_eq!(two.extra_name.as_deref(), Some("wait"));
        assert!(parse_envelope(b"[1, 2]").is_err());
        assert!(parse_envelope(br#"{"id": "x", "status": {}}"#).is_err());
        assert!(parse_envelope(br#"{"status": {}} trailing"#).is_err());
    }

    /// Errors in request bodies name the field and say what fits, never the JSON
    /// parser's position.
    #[test]
    fn body_errors_name_the_field_without_the_parser_position() {
        use crate::protocol::{SubmitRequest, UpdateRequest};
        fn submit_error(body: &str) -> String {
            let error = serde_json::from_str::<SubmitRequest>(body).unwrap_err();
            describe_body_error(body, &error)
        }
        let body = r#"{"jobs": [{"spec": {"argv": ["true"]}}, {"spec": {"argv": ["x"], "time_limit": "5 parsecs"}}]}"#;
        let message = submit_error(body);
        assert_eq!(
            message,
            "jobs[1].spec.time_limit: invalid duration \"5 parsecs\": expected e.g. \"90s\", \"5m\", \"1h30m\", \"2d\" or \"H:MM:SS\""
        );
        let message = submit_error(r#"{"jobs": [{"spec": {"argv": ["x"], "time_limit": "90"}}]}"#);
        assert!(
            message.starts_with("jobs[0].spec.time_limit: duration \"90\" has no unit"),
            "{message}"
        );
        let message = submit_error(r#"{"jobs": [{"spec": {"argv": ["x"], "time_limit": true}}]}"#);
        assert!(
            message.starts_with(
                "jobs[0].spec.time_limit: invalid type: boolean `true`, expected seconds"
            ),
            "{message}"
        );
        let message = submit_error(r#"{"jobs": [{"spec": {"argv": ["a\"b,{["], "core": 2}}]}"#);
        assert!(
            message.starts_with("jobs[0].spec.core: unknown field `core`"),
            "{message}"
        );
        let body = r#"{"jobs": [5], "time_limit": "5 parsecs"}"#;
        let error = serde_json::from_str::<UpdateRequest>(body).unwrap_err();
        assert_eq!(
            describe_body_error(body, &error),
            "time_limit: invalid duration \"5 parsecs\": expected e.g. \"90s\", \"5m\", \"1h30m\", \"2d\" or \"H:MM:SS\""
        );
        for body in [
            r#"{"jobs": [{"spec": {"argv": ["x"], "time_limit": "5 parsecs"}}]}"#,
            r#"{"jobs": 3}"#,
            r#"{"jobs": [{"spec": {"argv": 7}}]}"#,
            r#"{"jobs": [{"array": "1-3", "spec": {"argv": ["x"], "cores": -1}}]}"#,
        ] {
            let message = submit_error(body);
            assert!(!message.contains("line 1"), "{message}");
            assert!(!message.contains("column"), "{message}");
        }
    }

    #[test]
    fn encoded_lines_are_single_json_objects() {
        let line = encode(Some(RequestId(3)), "ok", &serde_json::json!({"a": "b\nc"})).unwrap();
        assert_eq!(line, b"{\"id\":3,\"ok\":{\"a\":\"b\\nc\"}}\n");
        let line = encode_with_null_id("error", &1).unwrap();
        assert_eq!(line, b"{\"id\":null,\"error\":1}\n");
    }
}
