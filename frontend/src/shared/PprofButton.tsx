// SPDX-License-Identifier: Apache-2.0
// Downloads the range's call stacks (with the view's filter) as a gzipped pprof profile, which
// `go tool pprof`, speedscope and other pprof readers open.
import { useState } from "react";
import { api, unwrap } from "../api/client";
import type { StackFilter } from "../api/queries";
import { downloadBlob } from "../lib/download";
import { rangeQuery, type TimeRange } from "../lib/timeRange";

export function PprofButton({ hostId, range, filter }: { hostId: string; range: TimeRange; filter: StackFilter }) {
  const [status, setStatus] = useState<string | null>(null);
  const download = async () => {
    setStatus("exporting…");
    try {
      const res = await api.GET("/api/v1/hosts/{host_id}/profile", {
        params: {
          path: { host_id: hostId },
          query: {
            ...rangeQuery(range),
            format: "pprof",
            pid: filter.pid ?? undefined,
            comm: filter.comm ?? undefined,
            cpu: filter.cpu ?? undefined,
            idle: filter.idle,
          },
        },
        parseAs: "blob",
      });
      const blob = await unwrap(Promise.resolve(res));
      const disposition = res.response.headers.get("Content-Disposition") ?? "";
      downloadBlob(/filename="([^"]+)"/.exec(disposition)?.[1] ?? "hotpath-profile.pb.gz", blob);
      setStatus(null);
    } catch (e) {
      setStatus(`export failed: ${e instanceof Error ? e.message : String(e)}`);
    }
  };
  return (
    <>
      <button type="button" onClick={() => void download()} title="gzipped profile.proto: go tool pprof, speedscope">
        Download pprof
      </button>
      {status && (
        <span className={status.startsWith("export failed") ? "error small" : "muted small"} role="status">
          {status}
        </span>
      )}
    </>
  );
}
