//! SASL on the client side: the tokens Gregor's own clients (the `gregor` CLI, the simulator's
//! producers and consumers) send to authenticate, one mechanism exchange as a value with no I/O.
//! `KafkaConn::authenticate` carries them in SaslHandshake v1 / SaslAuthenticate.
//!
//! The server's tokens are untrusted: a malformed one is an error, never a panic. With SCRAM the
//! client also checks the server's signature, so a server that does not hold the credential is
//! refused.

use super::sasl::Mechanism;
use super::scram::ScramClient;

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

#[derive(Debug)]
enum Step {
    Start,
    PlainSent,
    ScramFirstSent(ScramClient),
    ScramFinalSent(ScramClient),
    Done,
}

/// One client-side exchange.
#[derive(Debug)]
pub struct SaslClient {
    creds: SaslCredentials,
    nonce: String,
    step: Step,
}

impl SaslClient {
    /// `nonce`: fresh per login, printable ASCII without commas (SCRAM's client nonce).
    pub fn new(creds: SaslCredentials, nonce: String) -> SaslClient {
        SaslClient {
            creds,
            nonce,
            step: Step::Start,
        }
    }

    /// The client's first token.
    pub fn first(&mut self) -> Vec<u8> {
        match self.creds.mechanism {
            Mechanism::Plain => {
                self.step = Step::PlainSent;
                let mut t = Vec::with_capacity(self.creds.user.len() + self.creds.password.len() + 2);
                t.push(0);
                t.extend_from_slice(self.creds.user.as_bytes());
                t.push(0);
                t.extend_from_slice(self.creds.password.as_bytes());
                t
            }
            m => {
                let (client, token) = ScramClient::first(m, &self.creds.user, &self.nonce);
                self.step = Step::ScramFirstSent(client);
                token
            }
        }
    }

    /// The server answered `token` (with no error): `Ok(Some(next))` to send, `Ok(None)` when the
    /// exchange is complete, `Err` when the server's token is not what the mechanism expects.
    pub fn next(&mut self, token: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match std::mem::replace(&mut self.step, Step::Done) {
            Step::PlainSent => Ok(None),
            Step::ScramFirstSent(mut client) => {
                let fin = client.final_message(&self.creds.password, token)?;
                self.step = Step::ScramFinalSent(client);
                Ok(Some(fin))
            }
            Step::ScramFinalSent(client) => client.verify_server(token).map(|()| None),
            Step::Start | Step::Done => Err("server token out of order".into()),
        }
    }
}
