//! Server state: the script, attempt counters, id counters and the request log.

use crate::script::{ScriptEntry, When};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// One request the server received on an API path (`/v1/...`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// 1-based position among all recorded requests.
    pub seq: u64,
    pub method: String,
    pub path: String,
    /// Header names in lower case; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The JSON body, or the raw text as a JSON string when it is not JSON (`null` if empty).
    pub body: Value,
    /// `x-muster-agent-id`.
    pub agent: Option<String>,
    /// `x-muster-turn`, when it parses as an integer.
    pub turn: Option<u64>,
    /// How many times this (agent, turn) had been requested, this one included (model
    /// requests only; 0 for `count_tokens` and `models`).
    pub attempt: u32,
    /// `x-muster-run-id`.
    pub run_id: Option<String>,
    /// `x-muster-purpose`.
    pub purpose: Option<String>,
    /// The index of the script entry that answered, if any.
    pub entry: Option<usize>,
    /// The status code answered.
    pub status: u16,
    /// The error message answered (validation error, scripted error, unmatched).
    pub error: Option<String>,
    /// True when no script entry matched: the test should fail.
    pub unmatched: bool,
    /// The token usage the answer reported (a scripted reply; `None` for errors and metadata),
    /// so tests compare figures a client shows with what the server returned.
    #[serde(default)]
    pub usage: Option<ReturnedUsage>,
}

/// The token counts a reply reported, by Anthropic's names (an OpenAI reply's
/// `prompt_tokens` is input plus cache read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReturnedUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
}

impl RecordedRequest {
    /// A header's value (name in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub entries: Vec<ScriptEntry>,
    pub used: Vec<u32>,
    pub attempts: HashMap<(Option<String>, Option<u64>), u32>,
    pub requests: Vec<RecordedRequest>,
    /// `GET /v1/models` and `GET /props`.
    pub metadata_requests: Vec<RecordedRequest>,
    pub msg_counter: u64,
    pub tool_counter: u64,
    pub call_counter: u64,
    pub request_counter: u64,
}

impl State {
    pub fn append(&mut self, entries: Vec<ScriptEntry>) {
        self.used.extend(std::iter::repeat_n(0, entries.len()));
        self.entries.extend(entries);
    }

    pub fn reset(&mut self) {
        *self = State::default();
    }

    pub fn next_attempt(&mut self, agent: &Option<String>, turn: Option<u64>) -> u32 {
        let n = self.attempts.entry((agent.clone(), turn)).or_insert(0);
        *n += 1;
        *n
    }

    pub fn next_request_id(&mut self) -> String {
        self.request_counter += 1;
        format!("req_fake_{:04}", self.request_counter)
    }

    pub fn next_msg_id(&mut self) -> u64 {
        self.msg_counter += 1;
        self.msg_counter
    }

    pub fn next_tool_id(&mut self) -> String {
        self.tool_counter += 1;
        format!("toolu_fake_{:04}", self.tool_counter)
    }

    pub fn next_call_id(&mut self) -> String {
        self.call_counter += 1;
        format!("call_fake_{:04}", self.call_counter)
    }

    /// Chooses the entry answering a request: every field the entry sets must match; among
    /// matches the most specific wins (turn 8, attempt 4, when 2, agent 1, purpose 1), ties
    /// go to the earliest entry.
    pub fn select(&self, key: &MatchKey<'_>) -> Option<usize> {
        let mut best: Option<(u32, usize)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if !matches(e, key) {
                continue;
            }
            let score = u32::from(e.turn.is_some()) * 8
                + u32::from(e.attempt.is_some()) * 4
                + u32::from(e.when.is_some()) * 2
                + u32::from(e.agent.is_some())
                + u32::from(e.purpose.is_some());
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, i));
            }
        }
        best.map(|(_, i)| i)
    }
}

pub(crate) struct MatchKey<'a> {
    pub agent: Option<&'a str>,
    pub turn: Option<u64>,
    pub attempt: u32,
    pub purpose: Option<&'a str>,
    pub mails: &'a [Mail],
}

fn matches(e: &ScriptEntry, key: &MatchKey<'_>) -> bool {
    if let Some(agent) = &e.agent
        && key.agent != Some(agent.as_str())
    {
        return false;
    }
    if let Some(turn) = e.turn
        && key.turn != Some(turn)
    {
        return false;
    }
    if let Some(attempt) = e.attempt
        && key.attempt != attempt
    {
        return false;
    }
    if let Some(purpose) = &e.purpose
        && key.purpose != Some(purpose.as_str())
    {
        return false;
    }
    if let Some(when) = &e.when
        && !key.mails.iter().any(|m| mail_matches(when, m))
    {
        return false;
    }
    true
}

fn mail_matches(when: &When, mail: &Mail) -> bool {
    when.mail_type
        .as_ref()
        .is_none_or(|t| mail.attrs.get("type") == Some(t))
        && when
            .from
            .as_ref()
            .is_none_or(|f| mail.attrs.get("from") == Some(f))
}

/// A `<mail …>` tag found in the newest user turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Mail {
    pub attrs: BTreeMap<String, String>,
}

/// The texts of the newest user turn: every message with `role: "user"` after the newest
/// other message (mail delivered while an agent waited and mail taken at its next turn
/// boundary can be two user messages in a row); their string content, or their `text`
/// blocks (tool results are not searched).
pub(crate) fn newest_user_texts(body: &Value) -> Vec<String> {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut users: Vec<&Value> = messages
        .iter()
        .rev()
        .take_while(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .collect();
    users.reverse();
    users
        .into_iter()
        .flat_map(|user| match user.get("content") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(blocks)) => blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str).map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// Finds every `<mail attr="value" …>` tag in `text`. Values are in double or single quotes
/// and may use the XML escapes `&quot; &apos; &lt; &gt; &amp;`.
pub(crate) fn parse_mail_tags(text: &str) -> Vec<Mail> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find("<mail") {
        let after = &rest[pos + "<mail".len()..];
        // `<mailbox` is not a mail tag.
        if !after.starts_with(|c: char| c.is_whitespace() || c == '>' || c == '/') {
            rest = after;
            continue;
        }
        let (mail, consumed) = parse_attrs(after);
        out.push(mail);
        rest = &after[consumed..];
    }
    out
}

fn parse_attrs(s: &str) -> (Mail, usize) {
    let mut mail = Mail::default();
    let bytes = s.as_bytes();
    let mut i = 0;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= bytes.len() || bytes[i] == b'>' || bytes[i] == b'/' {
            return (mail, (i + 1).min(s.len()));
        }
        let name_start = i;
        while i < bytes.len() && !matches!(bytes[i], b'=' | b'>' | b'/') {
            if bytes[i].is_ascii_whitespace() {
                break;
            }
            i += 1;
        }
        let name = s[name_start..i].to_owned();
        if i >= bytes.len() || bytes[i] != b'=' {
            if name.is_empty() {
                i += 1;
            }
            continue;
        }
        i += 1;
        if i >= bytes.len() {
            return (mail, i);
        }
        let quote = bytes[i];
        if quote != b'"' && quote != b'\'' {
            continue;
        }
        i += 1;
        let value_start = i;
        while i < bytes.len() && bytes[i] != quote {
            i += 1;
        }
        let value = unescape(&s[value_start..i.min(s.len())]);
        mail.attrs.insert(name, value);
        i += 1;
    }
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Tokens for a count of characters: ceil(chars / 4).
pub(crate) fn tokens_for_chars(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

/// Characters of every string in the request that a model reads: all string values in
/// `system`, `messages` and `tools`, except those of the keys `role`, `type`, `id`,
/// `tool_use_id`, `tool_call_id` and `signature`.
pub(crate) fn input_chars(body: &Value) -> usize {
    const SKIP: [&str; 6] = [
        "role",
        "type",
        "id",
        "tool_use_id",
        "tool_call_id",
        "signature",
    ];
    fn count(v: &Value) -> usize {
        match v {
            Value::String(s) => s.chars().count(),
            Value::Array(a) => a.iter().map(count).sum(),
            Value::Object(o) => o
                .iter()
                .filter(|(k, _)| !SKIP.contains(&k.as_str()))
                .map(|(_, v)| count(v))
                .sum(),
            _ => 0,
        }
    }
    ["system", "messages", "tools"]
        .iter()
        .filter_map(|k| body.get(*k))
        .map(count)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(text: &str) -> Vec<Vec<(String, String)>> {
        parse_mail_tags(text)
            .into_iter()
            .map(|m| m.attrs.into_iter().collect())
            .collect()
    }

    #[test]
    fn mail_tags_parse_attributes_in_any_order_and_quoting() {
        let got = attrs(
            "x <mail type=\"a\" from='lead' note=\"&lt;&amp;&quot;\">body</mail> <mail from=\"w\" type=\"b\"/>",
        );
        assert_eq!(got.len(), 2);
        assert!(got[0].contains(&("type".into(), "a".into())));
        assert!(got[0].contains(&("from".into(), "lead".into())));
        assert!(got[0].contains(&("note".into(), "<&\"".into())));
        assert!(got[1].contains(&("type".into(), "b".into())));
    }

    #[test]
    fn mail_tag_parser_survives_broken_input() {
        for text in [
            "<mail",
            "<mail ",
            "<mail type=",
            "<mail type=\"unterminated",
            "<mail =\"x\" type=b from>",
            "<mailbox type=\"x\">",
            "<mail type=\"日本\" from=\"🦀\">",
            "<mail 日本=\"x\"",
            "<mail\ttype=\"t\"\n>",
            "",
        ] {
            let _ = parse_mail_tags(text);
        }
        assert!(parse_mail_tags("<mailbox type=\"x\">").is_empty());
        assert_eq!(
            attrs("<mail type=\"日本\" from=\"🦀\">")[0],
            vec![
                ("from".to_owned(), "🦀".to_owned()),
                ("type".to_owned(), "日本".to_owned())
            ]
        );
    }

    #[test]
    fn tokens_are_ceil_of_chars_over_four() {
        assert_eq!(tokens_for_chars(0), 0);
        assert_eq!(tokens_for_chars(1), 1);
        assert_eq!(tokens_for_chars(4), 1);
        assert_eq!(tokens_for_chars(5), 2);
    }
}
