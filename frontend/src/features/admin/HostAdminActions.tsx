// SPDX-License-Identifier: Apache-2.0
// An admin's actions on one host: retire it (its certificate stops working, its data stays) or
// delete it (with its samples and gaps), each after a confirmation that says what happens.
import { useState } from "react";
import { useNavigate } from "react-router-dom";
import { useHostAction } from "../../api/queries";
import type { Host } from "../../api/types";
import { useIsAdmin } from "./useIsAdmin";

export function HostAdminActions({ host, afterDelete = "/" }: { host: Host; afterDelete?: string | null }) {
  const isAdmin = useIsAdmin();
  const action = useHostAction();
  const navigate = useNavigate();
  const [confirming, setConfirming] = useState<"retire" | "delete" | null>(null);
  if (!isAdmin) return null;
  const run = (what: "retire" | "delete") =>
    action.mutate(
      { hostId: host.id, action: what },
      {
        onSuccess: () => {
          setConfirming(null);
          if (what === "delete" && afterDelete) navigate(afterDelete);
        },
      },
    );
  return (
    <span className="host-admin">
      {confirming === null ? (
        <>
          {host.status !== "retired" && (
            <button type="button" onClick={() => setConfirming("retire")}>
              Retire host
            </button>
          )}
          <button type="button" className="danger" onClick={() => setConfirming("delete")}>
            Delete host
          </button>
        </>
      ) : (
        <span role="group" aria-label={`Confirm ${confirming}`}>
          {confirming === "retire"
            ? `Retire ${host.hostname}? Its agent is disconnected and cannot connect again; its data stays.`
            : `Delete ${host.hostname} with its samples and gaps? Its agent can enrol again afterwards.`}{" "}
          <button type="button" className="danger" disabled={action.isPending} onClick={() => run(confirming)}>
            {confirming === "retire" ? "Retire" : "Delete"}
          </button>
          <button type="button" onClick={() => setConfirming(null)}>
            Cancel
          </button>
        </span>
      )}
      {action.isError && (
        <span className="error" role="alert">
          {action.error.message}
        </span>
      )}
    </span>
  );
}
