//! SASL on the client side: the tokens Gregor's own clients (the `gregor` CLI, the simulator's
//! producers and consumers) send to authenticate, one mechanism exchange as a value with no I/O.
//! `KafkaConn::authenticate` carries them in SaslHandshake v1 / SaslAuthenticate.
//!
//! The server's tokens are untrusted: a malformed one is an error, never a panic.

use super::sasl::Mechanism;

/// Who a client logs in as. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    pub mechanism: Mechanism,
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// One client-side exchange.
#[derive(Debug)]
pub struct SaslClient {
    creds: SaslCredentials,
    sent_first: bool,
}

impl SaslClient {
    pub fn new(creds: SaslCredentials) -> SaslClient {
        SaslClient {
            creds,
            sent_first: false,
        }
    }

    /// The client's first token.
    pub fn first(&mut self) -> Vec<u8> {
        self.sent_first = true;
        match self.creds.mechanism {
            Mechanism::Plain => {
                let mut t = Vec::with_capacity(self.creds.user.len() + self.creds.password.len() + 2);
                t.push(0);
                t.extend_from_slice(self.creds.user.as_bytes());
                t.push(0);
                t.extend_from_slice(self.creds.password.as_bytes());
                t
            }
        }
    }

    /// The server answered `token` (with no error): `Ok(Some(next))` to send, `Ok(None)` when the
    /// exchange is complete, `Err` when the server's token is not what the mechanism expects.
    pub fn next(&mut self, _token: &[u8]) -> Result<Option<Vec<u8>>, String> {
        if !self.sent_first {
            return Err("server token before the client's first".into());
        }
        match self.creds.mechanism {
            Mechanism::Plain => Ok(None),
        }
    }
}
