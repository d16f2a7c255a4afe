//! The agent's transcript as the model sees it: the context (messages), the durable turn
//! index, the usage the compaction trigger reads, and where the agent's turn stands (ended
//! with an answer, an answer committed without its end of turn, interrupted). No store: the
//! runtime commits each change, and resume replays the records through [`Transcript::replay`].

use crate::model::{ContentBlock, Message, Role, Usage};

use super::records::Record;

/// What the last `turn_interrupted` record leaves in the context: the model is told why its
/// turn ended before it sees the next prompt (Claude Code's habit).
pub const TURN_INTERRUPTED_NOTE: &str = "[The user interrupted your turn. Calls without a result \
     were stopped or never ran; wait for the next message.]";

#[derive(Debug, Default, Clone)]
pub(super) struct Transcript {
    /// The context as the model sees it next.
    pub messages: Vec<Message>,
    /// The model requests made so far (never reset).
    pub turn: u64,
    /// The usage of the newest response still in the context, and the context's length right
    /// after it (what came later is estimated): the compaction trigger's input.
    pub last_prompt: Option<(Usage, usize)>,
    /// The model ended its turn with this answer (its `finished` record is committed).
    pub finished: Option<String>,
    /// A final answer committed before a crash whose end of turn was not (resume sets it;
    /// the loop commits the end of turn first thing).
    pub unfinished_answer: Option<String>,
    /// The turn was interrupted (its `turn_interrupted` record is committed); the agent waits
    /// for its next prompt.
    pub interrupted: bool,
    /// A hook stopped the turn (its `hook_stopped` record is committed): the event and the
    /// hook's reason. The agent waits for its next prompt; the model is not told why.
    pub hook_stopped: Option<(String, String)>,
    /// How many times the context restarted (for the hooks' transcript file).
    pub restarts: u64,
}

impl Transcript {
    /// Appends a message committed as a record (`usage`: a response's, for the compaction
    /// trigger). A new message means the turn goes on.
    pub(super) fn push(&mut self, message: Message, usage: Option<Usage>) {
        self.messages.push(message);
        if let Some(usage) = usage {
            self.last_prompt = Some((usage, self.messages.len()));
        }
        self.finished = None;
        self.interrupted = false;
        self.hook_stopped = None;
    }

    /// The context restarts with `messages` (compaction, a reset after an approval).
    pub(super) fn restart(&mut self, messages: Vec<Message>) {
        self.messages = messages;
        self.last_prompt = None;
        self.restarts += 1;
    }

    /// The turn ended: with an answer, or interrupted.
    pub(super) fn end(&mut self, answer: Option<String>) {
        self.interrupted = answer.is_none();
        self.finished = answer;
        self.hook_stopped = None;
    }

    /// The turn ended because a hook of `event` said `continue: false`.
    pub(super) fn end_by_hook(&mut self, event: &str, reason: &str) {
        self.finished = None;
        self.interrupted = false;
        self.hook_stopped = Some((event.to_owned(), reason.to_owned()));
    }

    /// Whether the agent waits for its next prompt (its turn ended, either way).
    pub(super) fn turn_ended(&self) -> bool {
        self.finished.is_some() || self.interrupted || self.hook_stopped.is_some()
    }

    /// Replays one record (resume).
    pub(super) fn replay(&mut self, record: &Record) {
        match record {
            Record::Message {
                message,
                turn,
                usage,
                ..
            } => {
                if let Some(turn) = turn {
                    self.turn = self.turn.max(*turn);
                }
                self.push(message.clone(), *usage);
            }
            Record::Compacted { turn, messages, .. } => {
                self.turn = self.turn.max(*turn);
                self.restart(messages.clone());
            }
            Record::ContextReset { .. } => self.restart(Vec::new()),
            Record::Finished { result } => self.end(Some(result.clone())),
            Record::TurnInterrupted { .. } => self.end(None),
            Record::HookStopped { event, reason } => self.end_by_hook(event, reason),
            _ => {}
        }
    }

    /// The newest message, when it is the model's.
    pub(super) fn last_response(&self) -> Option<&Message> {
        self.messages
            .last()
            .filter(|message| message.role == Role::Assistant)
    }
}

/// The text of a user message: its blocks, then the mode reminder.
pub(super) fn user_message(mut blocks: Vec<ContentBlock>, reminder: String) -> Message {
    blocks.push(ContentBlock::text(reminder));
    Message {
        role: Role::User,
        content: blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_config::PermissionMode;

    fn message(role: Role, text: &str, turn: Option<u64>) -> Record {
        Record::Message {
            message: Message {
                role,
                content: vec![ContentBlock::text(text)],
            },
            turn,
            model: None,
            mode: PermissionMode::Default,
            stop_reason: None,
            usage: turn.map(|_| Usage::default()),
            cost_usd: None,
        }
    }

    /// Replaying a transcript gives the context, the highest turn and where the turn stands.
    #[test]
    fn replay_rebuilds_the_context_and_the_turns_end() {
        let mut transcript = Transcript::default();
        for record in [
            message(Role::User, "do it", None),
            message(Role::Assistant, "done", Some(1)),
            Record::Finished {
                result: "done".into(),
            },
        ] {
            transcript.replay(&record);
        }
        assert_eq!(transcript.messages.len(), 2);
        assert_eq!(transcript.turn, 1);
        assert_eq!(transcript.finished.as_deref(), Some("done"));
        assert!(transcript.turn_ended());
        assert_eq!(transcript.last_prompt.map(|(_, at)| at), Some(2));

        transcript.replay(&message(Role::User, "and now this", None));
        assert!(!transcript.turn_ended(), "a new prompt opens a new turn");
        transcript.replay(&Record::TurnInterrupted {
            reason: "the user interrupted the turn".into(),
        });
        assert!(transcript.interrupted && transcript.finished.is_none());
        assert!(transcript.turn_ended());

        transcript.replay(&Record::ContextReset {
            reason: "approved".into(),
        });
        assert!(transcript.messages.is_empty() && transcript.last_prompt.is_none());
        assert_eq!(transcript.turn, 1, "the turn index is never reset");
    }
}
