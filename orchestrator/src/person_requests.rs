//! A team run's requests to its person, put to the person's front end in this process (DESIGN
//! "The person's front ends"): `muster acp`'s editor ([`crate::acp`]) and `muster claude`'s
//! SDK program ([`crate::claude`]). A team run waits on them live — a teammate's plan (with the
//! revision diff of a re-submitted one), a merge (with the diff it adds), a permission ask, a
//! question — so each committed `approval_requested` for the person is put to the front end on
//! a thread of its own, and its answer is committed through the one decision path
//! ([`decide_as_human`]), which wakes the run. The request stays in the store whatever happens
//! here: an answer lost, a front end gone, and `muster approve` or the web inbox still decide
//! it; the first answer wins, and a front end that answered later is told who decided.
//!
//! A merge for the person is not asked live: the team never waits on one (it ends awaiting
//! the decision once nothing else moves), so the front end is asked about every request still
//! waiting on the person when the run stops ([`TeamPerson::ask_waiting`]), and the run is
//! carried on when one was decided ([`carry_on_while_decided`]) — a race-free order, as
//! `muster approve` then `muster resume`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use muster_agents::runtime::Terminal;
use muster_mailbox::{MessageBody, RequestRecord, RunStatus};
use muster_protocol::event::{ApprovalSubject, RunEvent};

use crate::human_decision::{Decision, RefusedDecision, decide_as_human};
use crate::lifecycle::{Ending, FrontEnd};
use crate::project::{Globals, Project};

/// A request to the person, as a front end shows it.
pub(crate) struct AskedRequest {
    /// The agent that asked.
    pub agent: String,
    pub request_id: String,
    /// The stored request's body (a plan, a merge, a permission ask, a question).
    pub body: MessageBody,
    /// For a re-submitted plan: the request it revises and the diff from that plan to this
    /// one.
    pub revision: Option<Revision>,
    /// For a merge: the unified diff the merge adds (from the recorded integration head to
    /// the merged tree); `None` when git cannot say.
    pub merge_diff: Option<String>,
}

/// What a re-submitted plan changed.
pub(crate) struct Revision {
    pub previous_request_id: String,
    pub diff: String,
}

/// A front end at which a person answers a team run's requests: a question is asked as the
/// front end asks a single run's ([`Terminal::answer_question`]), and another answer
/// committed first (`muster approve`, the web inbox, another front end) is told as there
/// ([`Terminal::decided_elsewhere`]).
pub(crate) trait PersonFrontEnd: Terminal {
    /// The front end's name in what it prints (`muster acp`, `muster claude`).
    fn name(&self) -> &'static str;
    /// Puts the request (a plan, a merge, a permission ask) to the person and blocks this
    /// (non-runtime) thread until they answer; `None` leaves it undecided (no answer, a kind
    /// this front end is not asked about, the front end gone).
    fn decide(&self, asked: &AskedRequest) -> Option<Decision>;
}

/// A team run's person at a front end of this process: what its requests are put to.
pub(crate) struct TeamPerson {
    pub global: Globals,
    pub front: Arc<dyn PersonFrontEnd>,
    pub run_id: String,
    /// The requests put to the front end during this prompt (each is asked once: a request
    /// can be announced more than once, and asked again when the run stops).
    asked: Mutex<HashSet<String>>,
    /// Whether a run that stops awaiting its person waits for the answers of the requests
    /// still put to the front end ([`TeamPerson::waiting_for_answers_in_flight`]).
    waits_for_answers: bool,
    /// The background asks, each telling whether its request is decided now.
    in_flight: Mutex<Vec<std::thread::JoinHandle<bool>>>,
}

impl TeamPerson {
    pub(crate) fn new(global: Globals, front: Arc<dyn PersonFrontEnd>, run_id: String) -> Self {
        TeamPerson {
            global,
            front,
            run_id,
            asked: Mutex::new(HashSet::new()),
            waits_for_answers: false,
            in_flight: Mutex::new(Vec::new()),
        }
    }

    /// A run that stops awaiting its person while a request is still put to the front end
    /// waits for that answer, and is carried on when it decides the request (the SDK's
    /// program is the person, as Claude Code waits on its `can_use_tool`).
    pub(crate) fn waiting_for_answers_in_flight(mut self) -> Self {
        self.waits_for_answers = true;
        self
    }

    /// Waits for the background asks still open (when this person waits for them); whether
    /// any decided its request.
    fn answered_in_flight(&self) -> bool {
        if !self.waits_for_answers {
            return false;
        }
        let open: Vec<_> = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        let mut decided = false;
        for ask in open {
            decided |= ask.join().unwrap_or(false);
        }
        decided
    }

    /// Whether `request_id` was not asked about yet (and is now taken as asked).
    fn first_time(&self, request_id: &str) -> bool {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(request_id.to_owned())
    }

    /// A committed `approval_requested` for the person (not a merge, asked when the run stops)
    /// is put to the front end in the background.
    pub(crate) fn ask_if_for_the_person(&self, event: &RunEvent) {
        let RunEvent::ApprovalRequested {
            agent,
            request_id,
            responder,
            subject,
        } = event
        else {
            return;
        };
        if muster_protocol::Responder::names_the_person(responder)
            && !matches!(subject, ApprovalSubject::Merge { .. })
            && self.first_time(request_id)
            && let Some(ask) = answer_in_background(self.request(request_id.clone(), agent.clone()))
        {
            self.in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(ask);
        }
    }

    /// Puts to the front end, one after the other, each request of the run still waiting on
    /// the person that it was not asked about yet; whether any is decided now.
    pub(crate) fn ask_waiting(&self) -> anyhow::Result<bool> {
        let project = Project::locate(&self.global)?;
        let waiting: Vec<(String, String)> =
            crate::lifecycle::tokio_runtime()?.block_on(async {
                let store = project.open_store().await?;
                anyhow::Ok(
                    store
                        .requests(&self.run_id)
                        .await?
                        .into_iter()
                        .filter(|r| r.response.is_none() && r.responder == muster_mailbox::HUMAN)
                        .map(|r| (r.request_id, r.requester))
                        .collect(),
                )
            })?;
        let mut decided = false;
        for (request_id, agent) in waiting {
            if self.first_time(&request_id) {
                decided |= self.request(request_id, agent).answer_now()?;
            }
        }
        Ok(decided)
    }

    fn request(&self, request_id: String, agent: String) -> PersonRequest {
        PersonRequest {
            global: self.global.clone(),
            front: self.front.clone(),
            run_id: self.run_id.clone(),
            request_id,
            agent,
        }
    }
}

/// A team run that stopped awaiting its person: each request still waiting that was not put
/// to the front end live (a merge, a request of an earlier process) is put to it now, and the
/// run carried on while the person decides one; else the ending stands.
pub(crate) fn carry_on_while_decided(
    global: &Globals,
    run_id: &str,
    mut ending: Ending,
    front: &FrontEnd,
    person: Option<&TeamPerson>,
) -> anyhow::Result<Ending> {
    let Some(person) = person else {
        return Ok(ending);
    };
    while ending.status == RunStatus::AwaitingDecision
        && (person.answered_in_flight() || person.ask_waiting()?)
    {
        let record = crate::lifecycle::record_of(global, run_id)?;
        ending = crate::team::resume_for_front(global, record, None, front.clone())?;
    }
    Ok(ending)
}

/// Puts the request to the front end on a thread of its own (the front end blocks until the
/// person answers; the run goes on meanwhile); the thread tells whether the request is
/// decided.
fn answer_in_background(asked: PersonRequest) -> Option<std::thread::JoinHandle<bool>> {
    let front = asked.front.name();
    let spawned = std::thread::Builder::new()
        .name(format!("person-ask-{}", asked.request_id))
        .spawn(move || match asked.answer_now() {
            Ok(decided) => decided,
            Err(error) => {
                eprintln!(
                    "{}: {} was not answered here ({error:#}); `muster approve` or the web \
                     inbox can decide it",
                    asked.front.name(),
                    asked.request_id
                );
                false
            }
        });
    spawned
        .inspect_err(|error| {
            eprintln!("{front}: a request could not be put to the person (no thread: {error})")
        })
        .ok()
}

/// One request to put to the front end.
struct PersonRequest {
    global: Globals,
    front: Arc<dyn PersonFrontEnd>,
    run_id: String,
    request_id: String,
    agent: String,
}

impl PersonRequest {
    /// Puts the request to the front end on this thread; whether it is decided now (by the
    /// person's answer here, or by another first).
    fn answer_now(&self) -> anyhow::Result<bool> {
        let project = Project::locate(&self.global)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let store = runtime.block_on(project.open_store())?;
        let requests = runtime.block_on(store.requests(&self.run_id))?;
        let Some(request) = requests
            .iter()
            .find(|r| r.request_id == self.request_id)
            .cloned()
        else {
            return Ok(false);
        };
        if request.response.is_some() {
            // Decided before it could be shown (another front end, `muster approve`).
            return Ok(true);
        }
        let shown = AskedRequest {
            agent: self.agent.clone(),
            request_id: self.request_id.clone(),
            revision: revision_of(&requests, &request),
            merge_diff: match request.body {
                MessageBody::MergeRequest { .. } => {
                    runtime.block_on(crate::serve::merge_diff(store.as_ref(), &request))
                }
                _ => None,
            },
            body: request.body.clone(),
        };
        let decision = match &shown.body {
            MessageBody::Question {
                question, options, ..
            } => self
                .front
                .answer_question(&shown.agent, question, options)
                .map(|text| Decision::Answer { text }),
            _ => self.front.decide(&shown),
        };
        let Some(decision) = decision else {
            return Ok(false);
        };
        let decided = runtime.block_on(decide_as_human(
            store.as_ref(),
            &project.runs_dir(),
            &request,
            decision,
        ));
        match decided {
            Ok(_) => Ok(true),
            Err(RefusedDecision::AlreadyDecided { by, .. }) => {
                self.front.decided_elsewhere(&self.request_id, &by);
                Ok(true)
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// The revision a re-submitted plan makes of the plan it revises.
fn revision_of(requests: &[RequestRecord], request: &RequestRecord) -> Option<Revision> {
    let previous = muster_mailbox::revision::stored_previous(request)?;
    let diff = crate::plan_diff::revision_diff(requests, previous, request)?;
    Some(Revision {
        previous_request_id: previous.to_owned(),
        diff,
    })
}
