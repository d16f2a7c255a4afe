//! Message kinds: the `type` tag of a message body and the store's `kind` column.

use serde::{Deserialize, Deserializer};

/// Declares the kinds once: the enum, [`MessageKind::known`] in the contract's order, and
/// each stored spelling.
macro_rules! kinds {
    ($($kind:ident = $spelling:literal),+ $(,)?) => {
        /// Every message kind muster speaks; a kind from a newer version stays `Other`, so its
        /// rows still load and are reported rather than dropped.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum MessageKind {
            $($kind,)+
            /// A kind this version does not know, as stored.
            Other(String),
        }

        impl MessageKind {
            /// Every kind this version knows, in the order of the contract.
            pub fn known() -> [MessageKind; 14] {
                [$(MessageKind::$kind),+]
            }

            /// The stored spelling.
            pub fn as_str(&self) -> &str {
                match self {
                    $(MessageKind::$kind => $spelling,)+
                    MessageKind::Other(kind) => kind,
                }
            }
        }
    };
}

kinds!(
    Text = "text",
    PlanApprovalRequest = "plan_approval_request",
    PlanApprovalResponse = "plan_approval_response",
    PermissionRequest = "permission_request",
    PermissionResponse = "permission_response",
    Question = "question",
    Answer = "answer",
    ShutdownRequest = "shutdown_request",
    ShutdownResponse = "shutdown_response",
    MergeRequest = "merge_request",
    MergeResponse = "merge_response",
    TaskAssignment = "task_assignment",
    IdleNotification = "idle_notification",
    VerificationReport = "verification_report",
);

/// How a message kind takes part in request/response correlation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Correlation {
    /// Not part of a request.
    None,
    /// Opens a request that one responder answers once.
    Request,
    /// Answers the request of the given kind.
    Response { answers: MessageKind },
}

impl MessageKind {
    /// Reads a stored spelling; an unknown one is kept as `Other`.
    pub fn parse(text: &str) -> MessageKind {
        MessageKind::known()
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .unwrap_or_else(|| MessageKind::Other(text.to_owned()))
    }

    /// The kind in words, for people: `plan_approval_request` is "plan approval request".
    pub fn in_words(&self) -> String {
        self.as_str().replace('_', " ")
    }

    /// How this kind takes part in request/response correlation.
    pub fn correlation(&self) -> Correlation {
        use MessageKind::*;
        let answers = match self {
            PlanApprovalRequest | PermissionRequest | Question | ShutdownRequest | MergeRequest => {
                return Correlation::Request;
            }
            PlanApprovalResponse => PlanApprovalRequest,
            PermissionResponse => PermissionRequest,
            Answer => Question,
            ShutdownResponse => ShutdownRequest,
            MergeResponse => MergeRequest,
            _ => return Correlation::None,
        };
        Correlation::Response { answers }
    }

    /// Whether this kind opens a request.
    pub fn is_request(&self) -> bool {
        self.correlation() == Correlation::Request
    }

    /// The kind that answers a request of this kind.
    pub fn response_kind(&self) -> Option<MessageKind> {
        MessageKind::known().into_iter().find(|kind| {
            kind.correlation()
                == Correlation::Response {
                    answers: self.clone(),
                }
        })
    }
}

crate::spelled_by_as_str!(MessageKind);

impl From<&str> for MessageKind {
    fn from(text: &str) -> Self {
        MessageKind::parse(text)
    }
}

impl<'de> Deserialize<'de> for MessageKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Ok(MessageKind::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_kind_reads_back_from_its_spelling_and_unknown_ones_are_kept() {
        for kind in MessageKind::known() {
            assert_eq!(MessageKind::parse(kind.as_str()), kind);
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_json::from_str::<MessageKind>(&json).unwrap(), kind);
        }
        let newer = MessageKind::parse("mode_set_request");
        assert_eq!(newer, MessageKind::Other("mode_set_request".into()));
        assert_eq!(newer.to_string(), "mode_set_request");
        assert_eq!(newer.correlation(), Correlation::None);
        assert_eq!(
            MessageKind::PlanApprovalRequest.in_words(),
            "plan approval request"
        );
    }

    /// The correlation table: each request kind has exactly one answering kind.
    #[test]
    fn each_request_kind_is_answered_by_one_response_kind() {
        use MessageKind::*;
        let table = [
            (PlanApprovalRequest, Some(PlanApprovalResponse)),
            (PermissionRequest, Some(PermissionResponse)),
            (Question, Some(Answer)),
            (ShutdownRequest, Some(ShutdownResponse)),
            (MergeRequest, Some(MergeResponse)),
            (Text, None),
            (TaskAssignment, None),
            (IdleNotification, None),
            (VerificationReport, None),
        ];
        for (request, response) in table {
            assert_eq!(request.is_request(), response.is_some(), "{request}");
            assert_eq!(request.response_kind(), response, "{request}");
        }
    }
}
