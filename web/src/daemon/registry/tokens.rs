//! Daemon tokens: made, revoked and listed here and in the store, and checked on
//! every daemon call, which names the machine its token is bound to.

use super::{Daemons, lock};
use crate::daemon::wire::TokenInfo;
use crate::secret::{new_token, token_hash};
use crate::store::{StoreError, TokenChange, TokenRow};
use berth_core::binding::MachineId;
use std::collections::HashMap;

/// Why a daemon call is refused with 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the request carries no daemon token (Authorization: Bearer) or machine id")]
    Missing,
    #[error("the daemon token is not valid")]
    Unknown,
    #[error("the daemon token {name:?} was revoked")]
    Revoked { name: String },
    #[error("the daemon token {name:?} belongs to another machine")]
    OtherMachine { name: String },
    #[error("machine {machine} is not registered with this server (or registered again since)")]
    NotRegistered { machine: String },
}

/// Who is calling, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub machine: MachineId,
    /// The machine's name as it registered.
    pub name: String,
    /// The member its token belongs to (`berth-server`).
    pub member: Option<String>,
}

impl Daemons {
    /// Reads the tokens again from the store: a server that starts leading a shared
    /// database serves daemons whose tokens were made through the previous leader.
    pub async fn reload_tokens(&self) -> Result<(), StoreError> {
        let tokens = self
            .inner
            .store
            .tokens()
            .await?
            .into_iter()
            .map(|t| (t.hash.clone(), t))
            .collect();
        lock(&self.inner.state).tokens = tokens;
        Ok(())
    }

    /// Checks a daemon call's token and machine id. `register`: the token may be bound
    /// to this machine now; otherwise the machine must be registered.
    pub fn authenticate(
        &self,
        token: Option<&str>,
        machine: Option<&str>,
    ) -> Result<(TokenRow, MachineId), AuthError> {
        let (Some(token), Some(machine)) = (token, machine) else {
            return Err(AuthError::Missing);
        };
        // Parsed here, where a daemon's call comes in: one that names no valid machine
        // id names none at all.
        let machine = MachineId::parse(machine).map_err(|_| AuthError::Missing)?;
        let state = lock(&self.inner.state);
        let row = state
            .tokens
            .get(&token_hash(token))
            .ok_or(AuthError::Unknown)?;
        if row.revoked_at.is_some() {
            return Err(AuthError::Revoked {
                name: row.name.clone(),
            });
        }
        match &row.machine {
            Some(m) if *m != machine => Err(AuthError::OtherMachine {
                name: row.name.clone(),
            }),
            _ => Ok((row.clone(), machine)),
        }
    }

    /// A registered caller of this process (`instance`), for every call but register.
    pub fn caller(&self, token: Option<&str>, machine: Option<&str>) -> Result<Caller, AuthError> {
        let (row, machine) = self.authenticate(token, machine)?;
        let state = lock(&self.inner.state);
        match (&row.machine, state.machines.get(&machine)) {
            (Some(_), Some(m)) => Ok(Caller {
                machine,
                name: m.name.clone(),
                member: row.member.clone(),
            }),
            _ => Err(AuthError::NotRegistered {
                machine: machine.to_string(),
            }),
        }
    }

    /// Creates a token named `name`; the token is in the answer only.
    pub async fn create_token(
        &self,
        name: String,
        member: Option<String>,
    ) -> Result<TokenChange<(TokenRow, String)>, StoreError> {
        let token = new_token()
            .map(|t| format!("berthd_{t}"))
            .map_err(|e| StoreError::Worker(format!("cannot make a token: {e}")))?;
        let hash = token_hash(&token);
        Ok(
            match self.inner.store.create_token(name, hash, member).await? {
                TokenChange::Done(row) => {
                    lock(&self.inner.state)
                        .tokens
                        .insert(row.hash.clone(), row.clone());
                    TokenChange::Done((row, token))
                }
                TokenChange::Exists => TokenChange::Exists,
                TokenChange::Unknown => TokenChange::Unknown,
                TokenChange::OtherMachine(m) => TokenChange::OtherMachine(m),
            },
        )
    }

    /// Revokes a token; its machine goes offline at once (its runs end
    /// `interrupted`, its waiting tasks wait).
    pub async fn revoke_token(&self, name: String) -> Result<TokenChange<TokenRow>, StoreError> {
        let change = self.inner.store.revoke_token(name).await?;
        if let TokenChange::Done(row) = &change {
            let machine = {
                let mut state = lock(&self.inner.state);
                state.tokens.insert(row.hash.clone(), row.clone());
                let window = self.inner.config.window;
                match row
                    .machine
                    .as_ref()
                    .and_then(|id| state.machines.remove(id).map(|m| (id.clone(), m)))
                {
                    Some((id, mut m)) => {
                        m.take_offline(window);
                        Some(id)
                    }
                    None => None,
                }
            };
            if let Some(id) = machine {
                self.inner.store.set_machine_online(id, false).await?;
            }
        }
        Ok(change)
    }

    /// Removes a member: their API token stops working, their daemon tokens are
    /// revoked and their machines go offline at once (their sessions' tasks wait).
    pub async fn remove_member(
        &self,
        name: String,
    ) -> Result<crate::store::MemberChange, StoreError> {
        let (change, tokens) = self.inner.store.remove_member(name).await?;
        for token in tokens {
            self.revoke_token(token).await?;
        }
        Ok(change)
    }

    /// Every token, with its machine's state.
    pub async fn token_infos(&self) -> Result<Vec<TokenInfo>, StoreError> {
        let rows = self.inner.store.tokens().await?;
        let machines: HashMap<MachineId, (String, Option<String>)> = self
            .inner
            .store
            .machines()
            .await?
            .into_iter()
            .map(|(id, name, seen)| (id, (name, seen)))
            .collect();
        let state = lock(&self.inner.state);
        Ok(rows
            .into_iter()
            .map(|r| {
                let live = r.machine.as_ref().and_then(|id| state.machines.get(id));
                let stored = r.machine.as_ref().and_then(|id| machines.get(id));
                let online = live.is_some_and(|m| m.online) && r.revoked_at.is_none();
                TokenInfo {
                    name: r.name,
                    machine_id: r.machine.clone(),
                    machine_name: live
                        .map(|m| m.name.clone())
                        .or_else(|| stored.map(|s| s.0.clone())),
                    created_at: r.created_at,
                    revoked_at: r.revoked_at,
                    member: r.member,
                    online,
                    last_seen: if online {
                        Some(crate::clock::now())
                    } else {
                        stored.and_then(|s| s.1.clone())
                    },
                }
            })
            .collect())
    }
}
