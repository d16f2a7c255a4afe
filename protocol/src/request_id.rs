//! Request ids: `{family}-{agent}-{n}`, where `n` counts the agent's requests of that family
//! in its run (a store counter named `{family}-{agent}`), so a resumed agent never reuses one.

use std::fmt;

/// The families of requests, each with the prefix its ids and counter carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestFamily {
    /// A plan approval (`ExitPlanMode`).
    Plan,
    /// A permission ask the engine routed to a responder.
    Permission,
    /// An `AskUserQuestion` routed to a responder.
    Question,
    /// The lead asking a teammate to shut down.
    Shutdown,
    /// A teammate's branch asking to be merged.
    Merge,
}

impl RequestFamily {
    const ALL: [RequestFamily; 5] = [
        RequestFamily::Plan,
        RequestFamily::Permission,
        RequestFamily::Question,
        RequestFamily::Shutdown,
        RequestFamily::Merge,
    ];

    /// The prefix of this family's ids.
    pub fn prefix(self) -> &'static str {
        match self {
            RequestFamily::Plan => "plan",
            RequestFamily::Permission => "perm",
            RequestFamily::Question => "question",
            RequestFamily::Shutdown => "shutdown",
            RequestFamily::Merge => "merge",
        }
    }

    /// The name of the store counter numbering `agent`'s requests of this family.
    pub fn counter_name(self, agent: &str) -> String {
        format!("{}-{agent}", self.prefix())
    }
}

/// One request's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestId {
    pub family: RequestFamily,
    /// The agent whose request it is (the asker; for a shutdown, the teammate asked).
    pub agent: String,
    /// The counter's value for this request, from 1.
    pub number: i64,
}

/// Text that is not a request id muster writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{found:?} is not a request id: expected plan-, perm-, question-, shutdown- or merge-, \
     then the agent's id, then -N (like plan-alice-1)"
)]
pub struct RequestIdError {
    pub found: String,
}

impl RequestId {
    /// The one constructor: `number` comes from the store counter
    /// [`RequestFamily::counter_name`] names.
    pub fn new(family: RequestFamily, agent: &str, number: i64) -> RequestId {
        RequestId {
            family,
            agent: agent.to_owned(),
            number,
        }
    }

    /// The one parser.
    pub fn parse(text: &str) -> Result<RequestId, RequestIdError> {
        let error = || RequestIdError {
            found: text.to_owned(),
        };
        let (rest, number) = text.rsplit_once('-').ok_or_else(error)?;
        let number: i64 = number.parse().map_err(|_| error())?;
        RequestFamily::ALL
            .into_iter()
            .find_map(|family| {
                let agent = rest.strip_prefix(family.prefix())?.strip_prefix('-')?;
                (!agent.is_empty() && number > 0).then(|| RequestId::new(family, agent, number))
            })
            .ok_or_else(error)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.family.prefix(), self.agent, self.number)
    }
}

impl From<RequestId> for String {
    fn from(id: RequestId) -> String {
        id.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_and_parse_back() {
        let table = [
            (RequestFamily::Plan, "alice", 1, "plan-alice-1"),
            (RequestFamily::Permission, "bob-2", 12, "perm-bob-2-12"),
            (RequestFamily::Question, "lead", 3, "question-lead-3"),
            (RequestFamily::Shutdown, "carol", 1, "shutdown-carol-1"),
            (RequestFamily::Merge, "dave", 2, "merge-dave-2"),
        ];
        for (family, agent, number, text) in table {
            let id = RequestId::new(family, agent, number);
            assert_eq!(id.to_string(), text);
            assert_eq!(RequestId::parse(text).unwrap(), id);
            assert_eq!(
                family.counter_name(agent),
                format!("{}-{agent}", family.prefix())
            );
        }
    }

    #[test]
    fn text_that_is_no_id_is_refused() {
        for bad in [
            "plan",
            "plan-1",
            "plan-alice",
            "plan-alice-x",
            "nope-alice-1",
            "plan-alice-0",
        ] {
            let error = RequestId::parse(bad).unwrap_err();
            assert_eq!(error.found, bad);
        }
    }
}
