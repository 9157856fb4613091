// What the page learns from the server once, and the wasm module.

import { getJSON } from "./dom.js";

let caps = null;
/** `GET capabilities` and `GET health`, once: `{home, machine, machineName, platform}`. */
export function serverFacts() {
  caps ??= Promise.all([getJSON("/api/v1/capabilities"), getJSON("/api/v1/health")]).then(([c, hl]) => {
    const cb = (c.ok && c.body) || {};
    const hb = (hl.ok && hl.body) || {};
    const machine = cb.machine ?? hb.machine ?? null;
    return {
      home: typeof cb.home === "string" ? cb.home : "",
      machine: typeof machine === "string" ? machine : machine?.id ?? "local",
      machineName: cb.machine_name ?? hb.machine_name ?? machine?.name ?? null,
      platform: cb.platform ?? hb.platform ?? null,
    };
  });
  return caps;
}

let wasm = null;
/** The wasm module (core's rules and resolution), or `{error}` when it cannot load. */
export function loadWasm() {
  wasm ??= (async () => {
    try {
      const mod = await import("/ui/pkg/berth_wasm.js");
      await mod.default();
      return { mod };
    } catch (e) {
      const r = await getJSON("/ui/pkg/berth_wasm_bg.wasm").catch(() => null);
      const err = r && r.body && r.body.error;
      return {
        error: err
          ? `${err.message} (${err.hint})`
          : `the preview module could not be loaded: ${e.message}`,
      };
    }
  })();
  return wasm;
}
