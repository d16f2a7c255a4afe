//! Teammates and subagents as subagent threads: for a client that advertised ACP's (unstable)
//! `clientCapabilities.subagents`, each agent other than the session's own (a team run's lead,
//! a single run's main agent) gets a child session of its own, `SESSION:AGENT`, announced on
//! its parent with a `subagent_update` before anything of it is sent. Its text, thoughts, tool
//! calls and mode changes, and the requests it puts to the person, carry the child's id; its
//! state (`running`, `requires_action` while it waits on a decision, `idle`) is a
//! `subagent_update` on the parent. A subagent's parent is the agent that started it
//! (`alice.sub-1` is a child of alice's thread, `lead.sub-1` of the session). A client that did
//! not advertise it is sent none of this (the protocol forbids it): everything stays on the
//! session, teammates' and subagents' calls named after them (`updates::title`).

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    IdleStateUpdate, RequiresActionStateUpdate, RunningStateUpdate, SessionId, SessionUpdate,
    StateUpdate, SubagentUpdate,
};
use muster_protocol::event::{AgentState, RunEvent};

use super::send;
use super::updates::To;

/// Where one session's updates go: the session, or its agents' threads.
pub(crate) struct Threads {
    cx: ConnectionTo<Client>,
    session: SessionId,
    /// The agent whose updates are the session's own.
    lead: &'static str,
    /// Whether the client advertised `subagents`.
    enabled: bool,
    /// The agents whose threads were announced.
    announced: Mutex<HashSet<String>>,
}

impl Threads {
    pub(crate) fn new(
        cx: ConnectionTo<Client>,
        session: SessionId,
        lead: &'static str,
        enabled: bool,
    ) -> Threads {
        Threads {
            cx,
            session,
            lead,
            enabled,
            announced: Mutex::new(HashSet::new()),
        }
    }

    /// Whether agents other than the lead get threads.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The session `agent`'s updates and requests carry: its thread (announced first) when
    /// threads are on and it is not the lead, else the session.
    pub(crate) fn session_of(&self, agent: &str) -> SessionId {
        if !self.enabled || agent == self.lead {
            return self.session.clone();
        }
        self.announce(agent, None);
        thread_id(&self.session, agent)
    }

    /// Sends `update` where it goes.
    pub(crate) fn send(&self, to: &To, update: SessionUpdate) {
        let session = match to {
            To::Session => self.session.clone(),
            To::Thread(agent) => self.session_of(agent),
        };
        send(&self.cx, &session, update);
    }

    /// What an event says of an agent's thread itself: its start (the thread announced, with
    /// its definition as the description) and its state.
    pub(crate) fn saw(&self, event: &RunEvent) {
        if !self.enabled {
            return;
        }
        match event {
            RunEvent::AgentStarted {
                agent, definition, ..
            } if agent != self.lead => {
                self.announce(agent, Some(definition));
            }
            RunEvent::AgentState { agent, state } if agent != self.lead => {
                self.announce(agent, None);
                let state = match state {
                    AgentState::Thinking | AgentState::CallingTool { .. } => {
                        StateUpdate::Running(RunningStateUpdate::new())
                    }
                    AgentState::WaitingOnDecision { .. } => {
                        StateUpdate::RequiresAction(RequiresActionStateUpdate::new())
                    }
                    AgentState::Idle => StateUpdate::Idle(IdleStateUpdate::new()),
                };
                let update = SubagentUpdate::new(thread_id(&self.session, agent)).state(state);
                send(
                    &self.cx,
                    &self.parent_of(agent),
                    SessionUpdate::SubagentUpdate(update),
                );
            }
            _ => {}
        }
    }

    /// Announces `agent`'s thread on its parent (the parent's first, when that is a thread
    /// too) unless it was; with `description`, says it again with it.
    fn announce(&self, agent: &str, description: Option<&str>) {
        let first = self
            .announced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(agent.to_owned());
        if !first && description.is_none() {
            return;
        }
        if let Some(parent) = parent_agent(agent).filter(|parent| *parent != self.lead) {
            self.announce(parent, None);
        }
        let mut update =
            SubagentUpdate::new(thread_id(&self.session, agent)).title(agent.to_owned());
        if let Some(description) = description {
            update = update.description(format!("{agent}, a {description} agent"));
        }
        send(
            &self.cx,
            &self.parent_of(agent),
            SessionUpdate::SubagentUpdate(update),
        );
    }

    /// The session `agent`'s thread is announced on: its starter's thread, or the session.
    fn parent_of(&self, agent: &str) -> SessionId {
        match parent_agent(agent) {
            Some(parent) if parent != self.lead => thread_id(&self.session, parent),
            _ => self.session.clone(),
        }
    }
}

/// The thread of `agent` in `session`.
pub(crate) fn thread_id(session: &SessionId, agent: &str) -> SessionId {
    SessionId::new(format!("{}:{agent}", session.0))
}

/// The agent that started subagent `agent` (`alice` for `alice.sub-1`).
fn parent_agent(agent: &str) -> Option<&str> {
    agent.rsplit_once(".sub-").map(|(parent, _)| parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subagents_parent_is_the_agent_that_started_it() {
        assert_eq!(parent_agent("alice.sub-1"), Some("alice"));
        assert_eq!(parent_agent("alice.sub-1.sub-2"), Some("alice.sub-1"));
        assert_eq!(parent_agent("alice"), None);
        assert_eq!(
            thread_id(&SessionId::new("r1"), "alice.sub-1").0.as_ref(),
            "r1:alice.sub-1"
        );
    }
}
