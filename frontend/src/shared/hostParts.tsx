// SPDX-License-Identifier: Apache-2.0
// Small pieces of a host's description shared by the host list and the host page: status,
// catalog state, cache geometry, sampling and capabilities. Anything the host cannot measure is
// shown as unavailable with the agent's reason.
import type { Capability, Host } from "../api/types";
import { formatAgo, formatBytes, formatCount } from "../lib/format";

export function HostStatus({ host }: { host: Host }) {
  if (host.online) {
    return <span className="status status-online">online</span>;
  }
  return (
    <span className="status status-offline">
      offline <span className="muted">· last seen {formatAgo(host.last_seen)}</span>
    </span>
  );
}

/** What needs an operator's eye: a retired or unenrolled host, a clock out of bounds, refused batches. */
export function HostFlags({ host }: { host: Host }) {
  const flags: { key: string; text: string; title: string }[] = [];
  if (host.status === "retired") {
    flags.push({
      key: "retired",
      text: "retired",
      title: "Its certificate no longer works; delete the host to let it enrol again",
    });
  } else if (!host.enrolled) {
    flags.push({ key: "unenrolled", text: "not enrolled", title: "The host holds no current certificate" });
  }
  if (host.clock_skewed && host.clock_offset_ms != null) {
    flags.push({
      key: "clock",
      text: `clock ${formatOffset(host.clock_offset_ms)}`,
      title: "The host's clock differs from the backend's beyond the bound; batches outside it are refused",
    });
  }
  if (host.refused_batches > 0) {
    flags.push({
      key: "refused",
      text: `${formatCount(host.refused_batches)} batches refused`,
      title: "Metric batches refused because their time was out of bounds; see the gaps",
    });
  }
  if (flags.length === 0) return null;
  return (
    <span className="host-flags">
      {flags.map((f) => (
        <span key={f.key} className={`flag flag-${f.key}`} title={f.title}>
          {f.text}
        </span>
      ))}
    </span>
  );
}

/** "+3 h 0 min ahead", "-12 s behind". */
export function formatOffset(ms: number): string {
  const abs = Math.abs(ms) / 1000;
  const dir = ms >= 0 ? "ahead" : "behind";
  if (abs < 120) return `${abs.toFixed(0)} s ${dir}`;
  if (abs < 7200) return `${(abs / 60).toFixed(0)} min ${dir}`;
  if (abs < 2 * 86400) return `${(abs / 3600).toFixed(1)} h ${dir}`;
  return `${formatCount(Math.round(abs / 86400))} days ${dir}`;
}

export function CatalogStatus({ host }: { host: Host }) {
  if (host.catalog_complete) {
    return (
      <span>
        {formatCount(host.function_count)} functions, {formatCount(host.block_count)} blocks
      </span>
    );
  }
  if (!host.online) return <span className="muted">catalog incomplete (host offline)</span>;
  return <span className="muted">loading catalog…</span>;
}

function capability(host: Host, name: string): Capability | undefined {
  return host.capabilities.find((c) => c.name === name);
}

export function L1iGeometry({ host }: { host: Host }) {
  if (host.l1i) {
    return (
      <span>
        {formatBytes(host.l1i.size_bytes)}, {host.l1i.line_bytes} B lines, {host.l1i.ways}-way
      </span>
    );
  }
  const why = capability(host, "l1i_geometry")?.detail || "the agent did not report it";
  return <Unavailable reason={why} />;
}

export function Sampling({ host }: { host: Host }) {
  if (host.sample_frequency_hz && host.sample_event) {
    return (
      <span>
        {host.sample_event} at {formatCount(host.sample_frequency_hz)} Hz
      </span>
    );
  }
  const cap = host.capabilities.find((c) => c.name.includes("sampl") && !c.available);
  return <Unavailable reason={cap?.detail || "the agent reported no sampling source"} />;
}

export function Unavailable({ reason }: { reason: string }) {
  return (
    <span className="unavailable">
      unavailable <span className="reason">({reason})</span>
    </span>
  );
}

export function CapabilityList({ capabilities }: { capabilities: Capability[] }) {
  if (capabilities.length === 0) return <span className="muted">none reported</span>;
  const sorted = capabilities
    .slice()
    .sort((a, b) => Number(b.available) - Number(a.available) || a.name.localeCompare(b.name));
  return (
    <ul className="capabilities">
      {sorted.map((c) => (
        <li key={c.name} className={c.available ? "cap-yes" : "cap-no"}>
          <span className="cap-name">{c.name}</span>
          {c.available ? (
            <span className="cap-state">{c.detail ? ` — ${c.detail}` : " — available"}</span>
          ) : (
            <span className="cap-state">
              {" "}
              — unavailable: <span className="reason">{c.detail || "no reason given"}</span>
            </span>
          )}
        </li>
      ))}
    </ul>
  );
}
