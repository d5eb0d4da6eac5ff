// SPDX-License-Identifier: Apache-2.0
// The fleet page, the first screen once more than one host exists: hosts grouped by kernel build
// (release and build id), each group with its host, online and offline counts, each host with its
// labels; a label filter (role=db) kept in the URL; a group's hot code and its installed plans one click
// away, and the plans installed across the fleet.
import { useState, type FormEvent } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { useFleetGroups } from "../../api/fleetQueries";
import { useLiveTopics } from "../../api/live";
import type { FleetGroup } from "../../api/types";
import { labelTexts, parseLabelFilter } from "./fleetModel";

export function FleetPage() {
  const [search, setSearch] = useSearchParams();
  const filterText = search.get("label") ?? "";
  const { labels } = parseLabelFilter(filterText);
  const groups = useFleetGroups(labels);
  useLiveTopics(["hosts"]);
  const [draft, setDraft] = useState(filterText);
  const [draftError, setDraftError] = useState<string | null>(null);
  const apply = (e: FormEvent) => {
    e.preventDefault();
    const parsed = parseLabelFilter(draft);
    setDraftError(parsed.error);
    if (parsed.error) return;
    const next = new URLSearchParams(search);
    if (parsed.labels.length) next.set("label", parsed.labels.join(" "));
    else next.delete("label");
    setSearch(next);
  };
  const hostCount = groups.data?.items.reduce((n, g) => n + g.host_count, 0) ?? 0;
  return (
    <section className="fleet">
      <div className="page-head">
        <h1>Fleet</h1>
        <Link to="/hosts">Host list</Link>{" "}
        <Link to={`/fleet/plans${labels.length ? `?label=${encodeURIComponent(labels.join(" "))}` : ""}`}>
          Installed plans
        </Link>
      </div>
      <form className="fleet-filter" onSubmit={apply} role="search" aria-label="Filter hosts by label">
        <label>
          Label filter{" "}
          <input
            type="search"
            value={draft}
            placeholder="role=db rack=r1"
            onChange={(e) => setDraft(e.target.value)}
            aria-invalid={draftError !== null}
          />
        </label>{" "}
        <button type="submit">Filter</button>
        {draftError && (
          <span className="error" role="alert">
            {" "}
            {draftError}
          </span>
        )}
      </form>
      {groups.isPending && <p className="muted">Loading the fleet…</p>}
      {groups.isError && (
        <p className="error" role="alert">
          Could not load the fleet: {groups.error.message}
        </p>
      )}
      {groups.data && (
        <p className="muted">
          {hostCount} host{hostCount === 1 ? "" : "s"} in {groups.data.total} kernel build
          {groups.data.total === 1 ? "" : "s"}
          {labels.length > 0 && <> with {labels.join(", ")}</>}
        </p>
      )}
      {groups.data?.items.map((g) => (
        <GroupSection key={g.id} group={g} labels={labels} />
      ))}
    </section>
  );
}

function GroupSection({ group, labels }: { group: FleetGroup; labels: string[] }) {
  const headingId = `group-${group.id}`;
  const q = labels.length ? `?label=${encodeURIComponent(labels.join(" "))}` : "";
  return (
    <section className="fleet-group" aria-labelledby={headingId}>
      <h2 id={headingId}>
        {group.kernel_release || "unknown kernel"}{" "}
        <span className="muted small mono" title="kernel build id">
          {group.kernel_build_id ? group.kernel_build_id.slice(0, 12) : "no build id"}
        </span>
      </h2>
      <p className="group-counts">
        <span>
          {group.host_count} host{group.host_count === 1 ? "" : "s"}
        </span>{" "}
        · <span className="ok">{group.online_count} online</span> ·{" "}
        <span className={group.offline_count ? "warn" : "muted"}>{group.offline_count} offline</span> ·{" "}
        <Link to={`/fleet/groups/${group.id}${q}`}>Hot code</Link> ·{" "}
        <Link to={`/fleet/plans?group=${group.id}${q ? `&${q.slice(1)}` : ""}`}>Installed plans</Link>
      </p>
      <table className="grid fleet-hosts" aria-label={`Hosts of ${group.kernel_release}`}>
        <thead>
          <tr>
            <th scope="col">Host</th>
            <th scope="col">Status</th>
            <th scope="col">Labels</th>
          </tr>
        </thead>
        <tbody>
          {group.hosts.map((h) => (
            <tr key={h.id}>
              <td>
                <Link to={`/hosts/${encodeURIComponent(h.id)}`}>{h.hostname}</Link>{" "}
              </td>
              <td>{h.online ? <span className="ok">online</span> : <span className="muted">offline</span>} </td>
              <td>
                {labelTexts(h.labels).map((t) => (
                  <span key={t} className="label-chip">
                    {t}{" "}
                  </span>
                ))}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
