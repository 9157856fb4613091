//! The `command` agent (docs/api.md): `CMD ARG...` in the working directory, the
//! prompt on stdin, the `BERTH_*` variables in its environment, stdout lines as
//! output, exit 0 as success.

use super::{AdapterError, Invocation, Turn};
use berth_core::exec::AgentSpec;

pub(super) fn invocation(spec: &AgentSpec, turn: &Turn<'_>) -> Result<Invocation, AdapterError> {
    let (program, args) = spec
        .command
        .split_first()
        .map(|(p, rest)| (p.clone(), rest.to_vec()))
        .ok_or_else(|| AdapterError::EmptyCommand {
            name: spec.name.clone(),
        })?;
    Ok(Invocation {
        program,
        args,
        stdin: Some(turn.prompt.as_bytes().to_vec()),
        pass_prefixes: &[],
        env: Vec::new(),
        stdin_pipe: false,
    })
}
