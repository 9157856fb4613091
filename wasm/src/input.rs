//! Reading the preview's JSON input into core's types, refusing unknown fields.

use berth_core::binding::{BindMode, BindingState, BindingView, MachineId};
use berth_core::resolve::{Origin, ProjectDir, Runtime};
use jsonc_parser::ast::{Object, Value};

/// What the preview resolves: the session's read view and the machines.
#[derive(Debug)]
pub struct PreviewInput {
    pub origin: Origin,
    pub runtime: Runtime,
    pub binding: Option<BindingView>,
    pub project_dirs: Vec<ProjectDir<String>>,
    pub claimer: MachineId,
    pub online: Vec<MachineId>,
}

type Fields<'a> = Object<'a>;

fn object<'a>(v: Value<'a>, what: &str) -> Result<Fields<'a>, String> {
    match v {
        Value::Object(o) => Ok(o),
        Value::StringLit(_)
        | Value::NumberLit(_)
        | Value::BooleanLit(_)
        | Value::Array(_)
        | Value::NullKeyword(_) => Err(format!("{what} must be an object")),
    }
}

fn deny_unknown(o: &Fields<'_>, known: &[&str], what: &str) -> Result<(), String> {
    for prop in &o.properties {
        let key = prop.name.as_str();
        if !known.contains(&key) {
            return Err(format!(
                "unknown field `{key}` in {what}; expected one of {}",
                known.join(", ")
            ));
        }
    }
    Ok(())
}

fn string(o: &mut Fields<'_>, key: &str, what: &str) -> Result<String, String> {
    o.take_string(key)
        .map(|s| s.value.into_owned())
        .ok_or_else(|| format!("{what} needs `{key}` as a string"))
}

fn named<T>(
    o: &mut Fields<'_>,
    key: &str,
    what: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, String> {
    let text = string(o, key, what)?;
    parse(&text).ok_or_else(|| format!("`{key}` in {what} cannot be \"{text}\""))
}

/// A machine id: in the browser, a label taken as given (`MachineId::label`); in the
/// native build of this crate (its tests), checked as every surface checks one.
#[cfg(target_arch = "wasm32")]
#[allow(clippy::unnecessary_wraps)]
fn machine_id(text: String) -> Result<MachineId, String> {
    Ok(MachineId::label(text))
}

#[cfg(not(target_arch = "wasm32"))]
fn machine_id(text: String) -> Result<MachineId, String> {
    MachineId::try_from(text).map_err(|e| e.to_string())
}

fn machines(o: &mut Fields<'_>, key: &str) -> Result<Vec<MachineId>, String> {
    let Some(list) = o.take_array(key) else {
        return Ok(Vec::new());
    };
    list.elements
        .into_iter()
        .map(|v| match v {
            Value::StringLit(s) => machine_id(s.value.into_owned()),
            Value::NumberLit(_)
            | Value::BooleanLit(_)
            | Value::Object(_)
            | Value::Array(_)
            | Value::NullKeyword(_) => Err(format!("`{key}` must list machine ids as strings")),
        })
        .collect()
}

fn binding(v: Value<'_>) -> Result<Option<BindingView>, String> {
    if let Value::NullKeyword(_) = v {
        return Ok(None);
    }
    let what = "the binding";
    let mut o = object(v, what)?;
    deny_unknown(
        &o,
        &["display", "daemon", "daemon_name", "mode", "state", "dir"],
        what,
    )?;
    // A session document from a local server carries `dir` too; the preview never
    // reads it, and nothing the bundle returns contains it.
    let _ = o.take("dir");
    Ok(Some(BindingView {
        display: string(&mut o, "display", what)?,
        daemon: machine_id(string(&mut o, "daemon", what)?)?,
        daemon_name: string(&mut o, "daemon_name", what)?,
        mode: named(&mut o, "mode", what, BindMode::from_name)?,
        state: match o.take_string("state") {
            Some(s) => BindingState::from_name(&s.value)
                .ok_or_else(|| format!("unknown binding state \"{}\"", s.value))?,
            None => BindingState::Ok,
        },
    }))
}

fn project_dir(v: Value<'_>) -> Result<ProjectDir<String>, String> {
    let what = "a project directory";
    let mut o = object(v, what)?;
    deny_unknown(&o, &["machine", "dir", "mode"], what)?;
    Ok(ProjectDir {
        machine: machine_id(string(&mut o, "machine", what)?)?,
        dir: string(&mut o, "dir", what)?,
        mode: match o.take_string("mode") {
            Some(m) => BindMode::from_name(&m.value)
                .ok_or_else(|| format!("unknown mode \"{}\"", m.value))?,
            None => BindMode::InPlace,
        },
    })
}

/// Reads `{origin, runtime?, binding?, project_dirs?, claimer, online?}`.
pub fn preview_input(v: Value<'_>) -> Result<PreviewInput, String> {
    let what = "the preview input";
    let mut o = object(v, what)?;
    deny_unknown(
        &o,
        &[
            "origin",
            "runtime",
            "binding",
            "project_dirs",
            "claimer",
            "online",
        ],
        what,
    )?;
    let runtime = match o.take_string("runtime") {
        Some(r) => Runtime::from_name(&r.value)
            .ok_or_else(|| format!("unknown runtime \"{}\"; use local or cloud", r.value))?,
        None => Runtime::Local,
    };
    let project_dirs = match o.take_array("project_dirs") {
        Some(list) => list
            .elements
            .into_iter()
            .map(project_dir)
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    Ok(PreviewInput {
        origin: named(&mut o, "origin", what, Origin::from_name)?,
        runtime,
        binding: match o.take("binding") {
            Some(b) => binding(b.value)?,
            None => None,
        },
        project_dirs,
        claimer: machine_id(string(&mut o, "claimer", what)?)?,
        online: machines(&mut o, "online")?,
    })
}
