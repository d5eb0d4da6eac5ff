// SPDX-License-Identifier: Apache-2.0
// A host's labels (role, region, rack, ...) as the fleet views group and filter by them: the agent's
// (from its config file) until an admin edits them here; the admin can also go back to the agent's.
import { useState } from "react";
import { useSetLabels } from "../../api/fleetQueries";
import type { Host } from "../../api/types";
import { labelTexts, parseLabelLines } from "./fleetModel";

/** `canEdit`: the signed-in user is an admin (the backend refuses anyone else's edit with 403). */
export function HostLabels({ host, canEdit }: { host: Host; canEdit: boolean }) {
  const isAdmin = canEdit;
  const save = useSetLabels();
  const [editing, setEditing] = useState(false);
  const [draft, setDraft] = useState("");
  const [error, setError] = useState<string | null>(null);
  const texts = labelTexts(host.labels);
  const start = () => {
    setDraft(texts.join("\n"));
    setError(null);
    setEditing(true);
  };
  const submit = () => {
    const parsed = parseLabelLines(draft);
    setError(parsed.error);
    if (parsed.error) return;
    save.mutate({ hostId: host.id, labels: parsed.labels }, { onSuccess: () => setEditing(false) });
  };
  return (
    <div className="host-labels" aria-label="Labels" role="group">
      {texts.length === 0 ? (
        <span className="muted">no labels</span>
      ) : (
        texts.map((t) => (
          <span key={t} className="label-chip">
            {t}{" "}
          </span>
        ))
      )}{" "}
      {host.labels_edited_by ? (
        <span className="muted small">
          set by {host.labels_edited_by}
          {labelTexts(host.agent_labels).length > 0 && (
            <> (the agent reports {labelTexts(host.agent_labels).join(" ")})</>
          )}
        </span>
      ) : (
        texts.length > 0 && <span className="muted small">from the agent&apos;s config</span>
      )}{" "}
      {isAdmin && !editing && (
        <>
          <button type="button" onClick={start}>
            Edit labels
          </button>
          {host.labels_edited_by && (
            <button
              type="button"
              disabled={save.isPending}
              onClick={() => save.mutate({ hostId: host.id, labels: null })}
            >
              Use the agent&apos;s labels
            </button>
          )}
        </>
      )}
      {isAdmin && editing && (
        <div>
          <label>
            Labels, one key=value a line
            <br />
            <textarea rows={4} value={draft} onChange={(e) => setDraft(e.target.value)} />
          </label>
          <br />
          <button type="button" disabled={save.isPending} onClick={submit}>
            Save labels
          </button>{" "}
          <button type="button" onClick={() => setEditing(false)}>
            Cancel
          </button>
        </div>
      )}
      {(error || save.isError) && (
        <span className="error" role="alert">
          {" "}
          {error ?? save.error?.message}
        </span>
      )}
    </div>
  );
}
