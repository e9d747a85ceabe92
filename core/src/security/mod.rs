//! Who is asking: the principal a connection speaks for, as Kafka names it (`User:alice`).
//!
//! A connection starts as `User:ANONYMOUS` (what Kafka's PLAINTEXT and SSL-without-client-auth
//! listeners give); SASL authentication replaces it with the authenticated user. Authorization
//! (ACLs) reads it for every request.

pub mod acl;
pub mod sasl;
pub mod sasl_client;
pub mod scram;
pub mod users;

use std::fmt;
use std::sync::Arc;

pub use sasl::{AuthStep, Mechanism, SaslConfig, SaslState, SecurityProtocol};
pub use sasl_client::{SaslClient, SaslCredentials};

/// Kafka's `KafkaPrincipal`: a type (always `User` here) and a name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Principal {
    pub principal_type: String,
    pub name: String,
}

impl Principal {
    /// The principal of a connection that has not authenticated: `User:ANONYMOUS`.
    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS")
    }

    pub fn user(name: &str) -> Principal {
        Principal {
            principal_type: "User".to_string(),
            name: name.to_string(),
        }
    }

    pub fn is_anonymous(&self) -> bool {
        *self == Principal::anonymous()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// What the broker knows about one client connection, carried from frame to frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnContext {
    /// The peer's `host:port`, or empty when unknown (tests that drive frames directly).
    pub peer: String,
    /// Who the connection speaks for; `User:ANONYMOUS` until SASL authenticates it.
    pub principal: Principal,
    /// Where the connection is in SASL authentication (`NotRequired` on a listener without it).
    pub sasl: SaslState,
    /// The client id of the connection's last request: the next one, nearly always the same,
    /// shares it instead of decoding a copy (see `decode_request_bytes_on`).
    pub client_id: Option<Arc<str>>,
    /// The topic the connection's last request named, shared likewise by the next.
    pub topic: Option<Arc<str>>,
}

impl ConnContext {
    pub fn new(peer: &str) -> ConnContext {
        ConnContext {
            peer: peer.to_string(),
            principal: Principal::anonymous(),
            sasl: SaslState::NotRequired,
            client_id: None,
            topic: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_print_as_kafka_writes_them() {
        assert_eq!(Principal::anonymous().to_string(), "User:ANONYMOUS");
        assert_eq!(Principal::user("alice").to_string(), "User:alice");
        assert!(Principal::anonymous().is_anonymous());
        assert!(!Principal::user("alice").is_anonymous());
        assert_eq!(ConnContext::new("127.0.0.1:5000").principal, Principal::anonymous());
    }
}
