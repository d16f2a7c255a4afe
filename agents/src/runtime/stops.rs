//! The stop conditions of one agent as a state machine: the chain of cut answers (see
//! [`super::limits`] for the endings it leads to) and an ending committed before a crash.
//! No store: the runtime commits, resume replays the records through
//! [`StopConditions::replay`].

use crate::model::{ContentBlock, Role, StopReason};

use super::limits::{AgentLimits, AgentStop, CutChain};
use super::records::Record;

/// The stop conditions of one agent as state: the chain of cut answers, and an ending
/// committed before a crash that the loop still has to return (resume sets it).
#[derive(Debug, Clone, Default)]
pub(super) struct StopConditions {
    /// The cut answers since the last complete response.
    pub cut_chain: CutChain,
    /// The runtime's ending committed before a crash.
    pub stopped: Option<AgentStop>,
}

/// What a response does to the stop conditions, decided before its commit and applied
/// ([`StopConditions::accept`]) after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ResponseCut {
    chain: CutChain,
    /// The response is a final answer cut by the output limit.
    pub cut_answer: bool,
    /// The continuations asked for before this response.
    pub continuations: usize,
    /// The limit on continuations.
    limit: usize,
}

impl ResponseCut {
    /// Whether the cut answer is continued (a request to go on commits with it).
    pub(super) fn continues(&self) -> bool {
        self.cut_answer && self.continuations < self.limit
    }

    /// Whether the cut answer used up the continuations: the agent ends with `output_limit`.
    pub(super) fn exhausted(&self) -> bool {
        self.cut_answer && self.continuations >= self.limit
    }
}

impl StopConditions {
    /// What the response `content` stopped for `stop_reason` does, under `limits`.
    pub(super) fn after_response(
        &self,
        content: &[ContentBlock],
        stop_reason: &StopReason,
        limits: &AgentLimits,
    ) -> ResponseCut {
        let mut chain = self.cut_chain.clone();
        let cut_answer = chain.push(content, stop_reason);
        ResponseCut {
            continuations: chain.cuts.saturating_sub(1),
            chain,
            cut_answer,
            limit: limits.continuations,
        }
    }

    /// Applies a committed response's cut.
    pub(super) fn accept(&mut self, cut: ResponseCut) {
        self.cut_chain = cut.chain;
    }

    /// The final answer whose last piece is `last`; the chain starts over.
    pub(super) fn final_answer(&mut self, last: &[ContentBlock]) -> String {
        let answer = self.cut_chain.answer(last);
        self.cut_chain = CutChain::default();
        answer
    }

    /// Replays one record (resume).
    pub(super) fn replay(&mut self, record: &Record) {
        match record {
            Record::Message {
                message,
                stop_reason,
                ..
            } if message.role == Role::Assistant => {
                let stop_reason = stop_reason.clone().unwrap_or(StopReason::EndTurn);
                self.cut_chain.push(&message.content, &stop_reason);
            }
            Record::Finished { .. }
            | Record::ContextReset { .. }
            | Record::TurnInterrupted { .. }
            | Record::HookStopped { .. } => {
                self.cut_chain = CutChain::default();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A cut final answer is continued until the continuations are used up; a complete
    /// answer ends the chain; a response with a tool call is never a cut answer.
    #[test]
    fn stop_conditions_continue_a_cut_answer_until_the_limit() {
        let limits = AgentLimits {
            continuations: 1,
            ..AgentLimits::default()
        };
        let text = |t: &str| vec![ContentBlock::text(t)];
        let mut stops = StopConditions::default();
        let first = stops.after_response(&text("Hel"), &StopReason::MaxTokens, &limits);
        assert!(first.continues() && !first.exhausted());
        stops.accept(first);
        let second = stops.after_response(&text("lo"), &StopReason::MaxTokens, &limits);
        assert!(!second.continues() && second.exhausted());
        assert_eq!(second.continuations, 1);
        let complete = stops.after_response(&text("lo"), &StopReason::EndTurn, &limits);
        assert!(!complete.cut_answer);
        stops.accept(complete);
        assert_eq!(stops.final_answer(&text("lo")), "Hello");
        assert_eq!(stops.cut_chain, CutChain::default());
        let with_call = stops.after_response(
            &[ContentBlock::ToolUse {
                id: "t".into(),
                name: "Read".into(),
                input: json!({}),
            }],
            &StopReason::MaxTokens,
            &limits,
        );
        assert!(!with_call.cut_answer);
    }
}
