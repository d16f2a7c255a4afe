//! Events of a team run on stdout per `--output`, each line after the commit it reports, and
//! the hook that lets a policy decide a teammate's plan the moment it is requested.

use std::io::Write as _;
use std::sync::{Mutex, OnceLock, Weak};

use muster_agents::runtime::{EventSink, RuntimeEvent};
use serde_json::{Value, json};

use crate::single_run::OutputFormat;
use crate::stream_json;

use super::Team;

pub(crate) use crate::stream_json::now_ms;

/// Prints a team run's events.
pub(crate) struct TeamPrinter {
    run_id: String,
    format: OutputFormat,
    lock: Mutex<()>,
    /// The team, once it exists (policy decisions on `approval_requested`).
    team: OnceLock<Weak<Team>>,
}

impl TeamPrinter {
    pub(crate) fn new(run_id: &str, format: OutputFormat) -> TeamPrinter {
        TeamPrinter {
            run_id: run_id.to_owned(),
            format,
            lock: Mutex::new(()),
            team: OnceLock::new(),
        }
    }

    pub(crate) fn attach(&self, team: Weak<Team>) {
        let _ = self.team.set(team);
    }

    /// One event: in the run's log, and a `stream-json` line (only with
    /// `--output stream-json`).
    pub(crate) fn line(&self, kind: &str, agent: &str, fields: Value) {
        if self.format == OutputFormat::StreamJson {
            self.print(kind, agent, fields);
        } else {
            stream_json::log(&stream_json::event(&self.run_id, kind, agent, fields));
        }
    }

    fn print(&self, kind: &str, agent: &str, fields: Value) {
        let event = stream_json::event(&self.run_id, kind, agent, fields);
        let _guard = self.lock.lock();
        stream_json::log(&event);
        stream_json::print(&event);
    }

    /// The `run_finished` event (json, stream-json) or the result text.
    pub(crate) fn finished(&self, status: &str, exit_code: u8, result: &Value, text: &str) {
        let mut fields = json!({"status": status, "exit_code": exit_code});
        if let (Value::Object(fields), Value::Object(result)) = (&mut fields, result) {
            fields.extend(result.clone());
        }
        match self.format {
            OutputFormat::Json | OutputFormat::StreamJson => {
                self.print("run_finished", super::LEAD, fields)
            }
            OutputFormat::Text => {
                stream_json::log(&stream_json::event(
                    &self.run_id,
                    "run_finished",
                    super::LEAD,
                    fields,
                ));
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{text}");
                let _ = stdout.flush();
            }
        }
    }
}

impl EventSink for TeamPrinter {
    fn emit(&self, event: RuntimeEvent) {
        if let RuntimeEvent::ApprovalRequested {
            request_id,
            responder,
            ..
        } = &event
            && responder.starts_with("policy:")
            && let Some(team) = self.team.get().and_then(Weak::upgrade)
        {
            let request_id = request_id.clone();
            tokio::spawn(async move { team.decide_by_policy(&request_id).await });
        }
        // A teammate's permission request or question for a policy or a person is settled
        // (or announced) as soon as it is committed, not at the lead's turn boundary.
        if let RuntimeEvent::MailSent {
            agent,
            to,
            kind,
            request_id: Some(request_id),
        } = &event
            && to == super::LEAD
            && agent != super::LEAD
            && matches!(kind.as_str(), "permission_request" | "question")
            && let Some(team) = self.team.get().and_then(Weak::upgrade)
        {
            let request_id = request_id.clone();
            tokio::spawn(async move { team.settle_for_others(&request_id).await });
        }
        // The lead waits on its own plan, or no longer: whoever watches the team looks again.
        if let RuntimeEvent::ApprovalRequested { agent, .. }
        | RuntimeEvent::ApprovalDecided { agent, .. } = &event
            && agent == super::LEAD
            && let Some(team) = self.team.get().and_then(Weak::upgrade)
        {
            team.lead_awaits_decision.store(
                matches!(event, RuntimeEvent::ApprovalRequested { .. }),
                std::sync::atomic::Ordering::SeqCst,
            );
            team.states.send_modify(|n| *n += 1);
        }
        if self.format == OutputFormat::StreamJson && stream_json::on_stream(&event) {
            self.print(event.kind(), event.agent(), event.fields());
        } else {
            stream_json::log(&stream_json::event(
                &self.run_id,
                event.kind(),
                event.agent(),
                event.fields(),
            ));
        }
        if self.format == OutputFormat::Text {
            stream_json::text_progress(&event);
        }
    }
}
