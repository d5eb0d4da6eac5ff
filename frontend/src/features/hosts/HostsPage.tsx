// SPDX-License-Identifier: Apache-2.0
// The first screen: what Hotpath is, where its documentation is, and the host list — every agent the
// backend knows, its kernel, CPU, cache geometry, connection status, catalog state and capabilities.
// Kept live by the WebSocket pushes.
import { useLiveTopics } from "../../api/live";
import { Link } from "react-router-dom";
import { useHosts } from "../../api/queries";
import { CapabilityList, CatalogStatus, HostFlags, HostStatus, L1iGeometry, Sampling } from "../../shared/hostParts";

export function HostsPage() {
  const hosts = useHosts();
  useLiveTopics(["hosts"]);
  return (
    <section>
      <section className="intro" aria-labelledby="intro-title">
        <h1 id="intro-title">Hotpath</h1>
        <p>
          A performance console for hot kernel paths. An agent on each host parses the running kernel into modules,
          functions and basic blocks, and samples every CPU to tell which of them are hot. Pick a host to search its
          whole kernel, rank its hottest functions over any time range, compare two ranges, and read a function's
          control-flow graph coloured by where the CPU spends its time.
        </p>
        <p>
          Documentation: <a href="/docs/architecture.md">architecture</a> · <a href="/docs/agent-cli.md">agent CLI</a> ·{" "}
          <a href="/docs/deployment.md">deployment</a> · <a href="/docs/security.md">security</a> ·{" "}
          <a href="/api/v1/docs">REST API</a> · <a href="/metrics">backend metrics</a>
        </p>
      </section>
      <h1>Hosts</h1>
      {hosts.isPending && <p className="muted">Loading hosts…</p>}
      {hosts.isError && (
        <p className="error" role="alert">
          Could not load hosts: {hosts.error.message}
        </p>
      )}
      {hosts.data && hosts.data.length === 0 && (
        <p className="muted">
          No agent has connected yet. Start <code>hotpathd run --server HOST:PORT</code> on a host.
        </p>
      )}
      {hosts.data && hosts.data.length > 0 && (
        <table className="grid hosts">
          <thead>
            <tr>
              <th scope="col">Host</th>
              <th scope="col">Kernel</th>
              <th scope="col">CPU</th>
              <th scope="col">L1i cache</th>
              <th scope="col">Status</th>
              <th scope="col">Catalog</th>
              <th scope="col">Sampling</th>
              <th scope="col">Capabilities</th>
            </tr>
          </thead>
          <tbody>
            {hosts.data.map((h) => (
              <tr key={h.id}>
                {/* The spaces keep cell texts apart in the row's text, so values read as whole words. */}
                <td>
                  <Link to={`/hosts/${encodeURIComponent(h.id)}`}>{h.hostname}</Link>{" "}
                  <div className="muted small">agent {h.agent_version}</div>{" "}
                </td>
                <td>{h.kernel_release} </td>
                <td>
                  {h.cpu_model} <span className="muted">× {h.cpu_count}</span>{" "}
                </td>
                <td>
                  <L1iGeometry host={h} />{" "}
                </td>
                <td>
                  <HostStatus host={h} /> <HostFlags host={h} />
                </td>
                <td>
                  <CatalogStatus host={h} />{" "}
                </td>
                <td>
                  <Sampling host={h} />{" "}
                </td>
                <td>
                  <CapabilityList capabilities={h.capabilities} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
