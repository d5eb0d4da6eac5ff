// SPDX-License-Identifier: Apache-2.0
// Small pieces of a host's description shared by the host list and the host page: status,
// catalog state, cache geometry, sampling and capabilities. Anything the host cannot measure is
// shown as unavailable with the agent's reason.
import type { Capability, Host } from "../../api/types";
import { formatAgo, formatBytes, formatCount } from "../../lib/format";

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

export function CatalogStatus({ host }: { host: Host }) {
  if (host.catalog_complete) {
    return <span>{formatCount(host.function_count)} functions, {formatCount(host.block_count)} blocks</span>;
  }
  if (!host.online) return <span className="muted">catalog incomplete (host offline)</span>;
  return <span className="muted">loading catalog…</span>;
}

function capability(host: Host, name: string): Capability | undefined {
  return host.capabilities.find((c) => c.name === name);
}

export function L1iGeometry({ host }: { host: Host }) {
  if (host.l1i) {
    return <span>{formatBytes(host.l1i.size_bytes)}, {host.l1i.line_bytes} B lines, {host.l1i.ways}-way</span>;
  }
  const why = capability(host, "l1i_geometry")?.detail || "the agent did not report it";
  return <Unavailable reason={why} />;
}

export function Sampling({ host }: { host: Host }) {
  if (host.sample_frequency_hz && host.sample_event) {
    return <span>{host.sample_event} at {formatCount(host.sample_frequency_hz)} Hz</span>;
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
  const sorted = capabilities.slice().sort((a, b) => Number(b.available) - Number(a.available) || a.name.localeCompare(b.name));
  return (
    <ul className="capabilities">
      {sorted.map((c) => (
        <li key={c.name} className={c.available ? "cap-yes" : "cap-no"}>
          <span className="cap-name">{c.name}</span>
          {c.available ? (
            <span className="cap-state">{c.detail ? ` — ${c.detail}` : " — available"}</span>
          ) : (
            <span className="cap-state"> — unavailable: <span className="reason">{c.detail || "no reason given"}</span></span>
          )}
        </li>
      ))}
    </ul>
  );
}
