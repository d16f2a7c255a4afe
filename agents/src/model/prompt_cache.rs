//! A simulator of the Anthropic prompt cache, by fixed rules, for `muster bench cache` and the
//! request-building tests. It answers "what would the real API read from cache" from the
//! exact bodies muster sends, with these rules (issue 19) and no others:
//!
//! - a request is the sequence of blocks tools → system → messages (each tool, each system
//!   block, each message content block; a string `system` or `content` is one block);
//! - a block carrying `cache_control` is a breakpoint; more than [`CacheRules::max_breakpoints`]
//!   (4) is an error, as the API refuses such a request;
//! - a breakpoint caches the prefix ending at it when that prefix is at least
//!   [`CacheRules::min_tokens`] (1024) tokens;
//! - a request reads from cache the longest prefix identical to a prefix cached by an earlier
//!   request of the same simulation (any agent), ending at one of its breakpoints or within
//!   the [`CacheRules::lookback`] (20) blocks before one;
//! - tokens are a prefix's JSON length ÷ 4 (the length of its blocks' compact JSON, without
//!   `cache_control`, and with each message block tagged by its role).
//!
//! `cache_control` is not part of a block's identity (moving a breakpoint does not change the
//! prefix), the role is (a user text and an assistant text are different blocks). What a
//! request writes is the prefix at its furthest caching breakpoint beyond what it read.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Value, json};

/// The rules' constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRules {
    /// The shortest prefix a breakpoint caches, in tokens.
    pub min_tokens: u64,
    /// How many blocks before a breakpoint a cached prefix may end and still be read.
    pub lookback: usize,
    /// The most breakpoints one request may carry.
    pub max_breakpoints: usize,
    /// JSON characters per token.
    pub chars_per_token: u64,
}

impl Default for CacheRules {
    fn default() -> Self {
        CacheRules {
            min_tokens: 1024,
            lookback: 20,
            max_breakpoints: 4,
            chars_per_token: 4,
        }
    }
}

/// A request the rules refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptCacheError {
    #[error("the request carries {found} cache_control breakpoints; the API takes at most {max}")]
    TooManyBreakpoints { found: usize, max: usize },
    #[error("the request body is not a Messages request: {0}")]
    NotARequest(&'static str),
}

/// One block of a request, as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheBlock {
    /// The block's compact JSON without `cache_control` (its identity and its size).
    pub key: String,
    /// Whether it carries `cache_control`.
    pub breakpoint: bool,
}

/// What one request reads and writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheOutcome {
    /// All input tokens of the request.
    pub input_tokens: u64,
    /// Tokens read from cache.
    pub read_tokens: u64,
    /// Tokens written to cache (beyond what was read).
    pub write_tokens: u64,
    /// The longest prefix this request shares with any earlier request, wherever it ends:
    /// the most any placement of breakpoints could have read (the rest is new content).
    pub shared_tokens: u64,
    /// Breakpoints the request carried.
    pub breakpoints: usize,
    /// Blocks the request carried.
    pub blocks: usize,
}

impl CacheOutcome {
    /// Tokens neither read nor written.
    pub fn uncached_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.read_tokens)
            .saturating_sub(self.write_tokens)
    }
}

/// The blocks of a Messages request body, in cache order: tools, system, messages.
pub fn request_blocks(body: &Value) -> Result<Vec<CacheBlock>, PromptCacheError> {
    let mut blocks = Vec::new();
    if let Some(tools) = body.get("tools") {
        let tools = tools
            .as_array()
            .ok_or(PromptCacheError::NotARequest("`tools` is not an array"))?;
        blocks.extend(tools.iter().map(|t| block(json!({"tool": t}))));
    }
    match body.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::Array(system)) => {
            blocks.extend(system.iter().map(|b| block(json!({"system": b}))));
        }
        Some(other) => blocks.push(block(json!({"system": other}))),
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or(PromptCacheError::NotARequest("no `messages` array"))?;
    for message in messages {
        let role = message.get("role").cloned().unwrap_or(Value::Null);
        match message.get("content") {
            Some(Value::Array(content)) => blocks.extend(
                content
                    .iter()
                    .map(|b| block(json!({"role": role, "block": b}))),
            ),
            Some(other) => blocks.push(block(json!({"role": role, "block": other}))),
            None => return Err(PromptCacheError::NotARequest("a message has no `content`")),
        }
    }
    Ok(blocks)
}

/// A block with its breakpoint taken off the identity. The marker sits on the inner block
/// (`{"tool": {.., "cache_control"}}`, `{"role", "block": {.., "cache_control"}}`).
fn block(mut wrapped: Value) -> CacheBlock {
    let mut breakpoint = false;
    if let Some(map) = wrapped.as_object_mut() {
        for inner in map.values_mut() {
            if let Some(inner) = inner.as_object_mut() {
                breakpoint |= inner.remove("cache_control").is_some();
            }
        }
    }
    CacheBlock {
        key: wrapped.to_string(),
        breakpoint,
    }
}

/// The cache of one run: every prefix a request cached so far, shared by all agents.
#[derive(Debug, Default)]
pub struct PromptCacheSim {
    rules: CacheRules,
    /// Hashes of the cached prefixes, chained block by block.
    cached: HashSet<u64>,
    /// Hashes of every prefix of every request so far.
    seen: HashSet<u64>,
}

impl PromptCacheSim {
    pub fn new(rules: CacheRules) -> Self {
        PromptCacheSim {
            rules,
            cached: HashSet::new(),
            seen: HashSet::new(),
        }
    }

    /// Applies the rules to one request body: what it reads from the earlier requests'
    /// prefixes, then what it caches for the later ones.
    pub fn request(&mut self, body: &Value) -> Result<CacheOutcome, PromptCacheError> {
        self.blocks(&request_blocks(body)?)
    }

    /// [`PromptCacheSim::request`] on blocks already taken apart.
    pub fn blocks(&mut self, blocks: &[CacheBlock]) -> Result<CacheOutcome, PromptCacheError> {
        let breakpoints: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].breakpoint)
            .collect();
        if breakpoints.len() > self.rules.max_breakpoints {
            return Err(PromptCacheError::TooManyBreakpoints {
                found: breakpoints.len(),
                max: self.rules.max_breakpoints,
            });
        }
        // `chars[i]` and `hashes[i]`: the prefix ending at block i.
        let mut chars = Vec::with_capacity(blocks.len());
        let mut hashes = Vec::with_capacity(blocks.len());
        let (mut total, mut hasher) = (0u64, DefaultHasher::new());
        for b in blocks {
            total += b.key.len() as u64;
            b.key.hash(&mut hasher);
            chars.push(total);
            hashes.push(hasher.finish());
        }
        let tokens = |chars: u64| chars / self.rules.chars_per_token;
        let read_end = breakpoints
            .iter()
            .flat_map(|&b| b.saturating_sub(self.rules.lookback)..=b)
            .filter(|&p| self.cached.contains(&hashes[p]))
            .max();
        let read_tokens = read_end.map_or(0, |p| tokens(chars[p]));
        let caching: Vec<usize> = breakpoints
            .iter()
            .copied()
            .filter(|&b| tokens(chars[b]) >= self.rules.min_tokens)
            .collect();
        let write_tokens = caching
            .last()
            .map_or(0, |&b| tokens(chars[b]).saturating_sub(read_tokens));
        self.cached.extend(caching.iter().map(|&b| hashes[b]));
        let shared = hashes.iter().take_while(|h| self.seen.contains(h)).count();
        let shared_tokens = shared.checked_sub(1).map_or(0, |p| tokens(chars[p]));
        self.seen.extend(hashes.iter().copied());
        Ok(CacheOutcome {
            input_tokens: tokens(total),
            read_tokens,
            write_tokens,
            shared_tokens,
            breakpoints: breakpoints.len(),
            blocks: blocks.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body from a compact description: each char is a block of `size` JSON characters,
    /// its letter its identity; an uppercase letter is a breakpoint. The first block is the
    /// system prompt, the rest user text blocks of one message.
    fn body(spec: &str, size: usize) -> Value {
        let text = |c: char| c.to_ascii_lowercase().to_string().repeat(size);
        let mark = |c: char, v: Value| -> Value {
            let mut v = v;
            if c.is_ascii_uppercase() {
                v["cache_control"] = json!({"type": "ephemeral"});
            }
            v
        };
        let mut chars = spec.chars();
        let first = chars.next().unwrap_or('s');
        let system = vec![mark(first, json!({"type": "text", "text": text(first)}))];
        let content: Vec<Value> = chars
            .map(|c| mark(c, json!({"type": "text", "text": text(c)})))
            .collect();
        json!({"system": system, "messages": [{"role": "user", "content": content}]})
    }

    struct Case {
        name: &'static str,
        /// Requests in order, as for [`body`].
        requests: Vec<String>,
        size: usize,
        /// `(read, write)` tokens of the last request.
        last: (u64, u64),
    }

    /// Tokens of the first `n` blocks of a [`body`] with blocks of `size` characters: the
    /// system block is `{"system":{"text":"…","type":"text"}}`, a user block
    /// `{"block":{"text":"…","type":"text"},"role":"user"}`.
    fn prefix_tokens(n: usize, size: usize) -> u64 {
        if n == 0 {
            return 0;
        }
        let system = 36 + size;
        let user = 49 + size;
        ((system + (n - 1) * user) / 4) as u64
    }

    /// `first`, `fill` × `n`, then `last`.
    fn spec(first: &str, fill: char, n: usize, last: &str) -> String {
        format!("{first}{}{last}", fill.to_string().repeat(n))
    }

    #[test]
    fn the_rules_by_case() {
        let big = 4096; // one block alone passes the minimum
        let small = 100; // a block of ~37 tokens
        let s = |t: &str| t.to_owned();
        let cases = [
            Case {
                name: "a repeated request reads its whole cached prefix",
                requests: vec![s("Sab"), s("Sab")],
                size: big,
                last: (prefix_tokens(1, big), 0),
            },
            Case {
                name: "a prefix under the minimum is never cached",
                requests: vec![s("sA"), s("sA")],
                size: small,
                last: (0, 0),
            },
            Case {
                name: "the first request reads nothing and writes to its furthest breakpoint",
                requests: vec![s("SaB")],
                size: big,
                last: (0, prefix_tokens(3, big)),
            },
            Case {
                name: "a cached prefix ending 20 blocks before a breakpoint is read",
                requests: vec![s("sA"), spec("sa", 'c', 19, "C")],
                size: big,
                last: (
                    prefix_tokens(2, big),
                    prefix_tokens(22, big) - prefix_tokens(2, big),
                ),
            },
            Case {
                name: "one ending 21 blocks before is not",
                requests: vec![s("sA"), spec("sa", 'c', 20, "C")],
                size: big,
                last: (0, prefix_tokens(23, big)),
            },
            Case {
                name: "a changed block before the breakpoint breaks the prefix there",
                requests: vec![s("SaB"), s("SxB")],
                size: big,
                last: (
                    prefix_tokens(1, big),
                    prefix_tokens(3, big) - prefix_tokens(1, big),
                ),
            },
            Case {
                name: "the marker is not part of the block: a moved breakpoint still reads",
                requests: vec![s("sAb"), s("saB")],
                size: big,
                last: (
                    prefix_tokens(2, big),
                    prefix_tokens(3, big) - prefix_tokens(2, big),
                ),
            },
            Case {
                name: "a request without breakpoints reads nothing",
                requests: vec![s("SA"), s("sa")],
                size: big,
                last: (0, 0),
            },
            Case {
                name: "the minimum counts the whole prefix, not the block",
                requests: vec![spec("s", 's', 40, "A"), spec("s", 's', 40, "A")],
                size: small,
                last: (prefix_tokens(42, small), 0),
            },
            Case {
                name: "under the minimum, the same prefix one block shorter is not cached",
                requests: vec![spec("s", 's', 25, "A"), spec("s", 's', 25, "A")],
                size: small,
                last: (0, 0),
            },
        ];
        for case in cases {
            let mut sim = PromptCacheSim::new(CacheRules::default());
            let mut last = CacheOutcome::default();
            for spec in &case.requests {
                last = sim.request(&body(spec, case.size)).unwrap();
            }
            assert_eq!(
                (last.read_tokens, last.write_tokens),
                case.last,
                "{}",
                case.name
            );
            assert!(
                last.read_tokens + last.write_tokens <= last.input_tokens,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn tokens_are_the_prefix_json_length_over_four() {
        let b = body("sab", 4096);
        let blocks = request_blocks(&b).unwrap();
        let chars: usize = blocks.iter().map(|b| b.key.len()).sum();
        let outcome = PromptCacheSim::default().request(&b).unwrap();
        assert_eq!(outcome.input_tokens, (chars / 4) as u64);
        assert_eq!(outcome.input_tokens, prefix_tokens(3, 4096));
    }

    #[test]
    fn the_shared_prefix_bounds_what_any_breakpoints_could_read() {
        let mut sim = PromptCacheSim::default();
        sim.request(&body("sab", 4096)).unwrap();
        let second = sim.request(&body("sabc", 4096)).unwrap();
        assert_eq!(second.shared_tokens, prefix_tokens(3, 4096));
        assert_eq!(second.read_tokens, 0, "no breakpoints: nothing read");
        let third = sim.request(&body("sxbc", 4096)).unwrap();
        assert_eq!(third.shared_tokens, prefix_tokens(1, 4096));
    }

    #[test]
    fn five_breakpoints_are_refused() {
        let mut sim = PromptCacheSim::new(CacheRules::default());
        assert_eq!(
            sim.request(&body("SABCD", 10)),
            Err(PromptCacheError::TooManyBreakpoints { found: 5, max: 4 })
        );
        assert!(sim.request(&body("SABC", 10)).is_ok());
    }

    #[test]
    fn tools_come_first_and_roles_are_part_of_a_block() {
        let tool = json!({"name": "Read", "description": "d".repeat(5000), "input_schema": {},
                          "cache_control": {"type": "ephemeral"}});
        let user = json!({"tools": [tool], "system": "s",
                          "messages": [{"role": "user", "content": "hi"}]});
        let blocks = request_blocks(&user).unwrap();
        assert_eq!(blocks.len(), 3);
        assert!(blocks[0].breakpoint && blocks[0].key.starts_with("{\"tool\""));
        assert!(!blocks[0].key.contains("cache_control"));
        let mut assistant = user.clone();
        assistant["messages"][0]["role"] = json!("assistant");
        assert_ne!(request_blocks(&assistant).unwrap()[2], blocks[2]);
        // Another agent with the same tools reads the tools' prefix.
        let mut sim = PromptCacheSim::default();
        sim.request(&user).unwrap();
        let other = sim.request(&assistant).unwrap();
        assert_eq!(other.read_tokens, (blocks[0].key.len() / 4) as u64);
    }

    #[test]
    fn a_body_that_is_not_a_request_is_an_error() {
        assert!(matches!(
            request_blocks(&json!({"model": "m"})),
            Err(PromptCacheError::NotARequest(_))
        ));
    }
}
