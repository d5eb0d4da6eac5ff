// SPDX-License-Identifier: Apache-2.0
// One function of a host: its summary, the control-flow graph coloured by recent samples, the
// instructions of the selected block, and its callees as links to their own pages.
import { useCallback, useMemo, useState } from "react";
import { Link, useParams } from "react-router-dom";
import { ApiError } from "../../api/client";
import { useFunctionDetail, useFunctionSamples, useInstructions } from "../../api/queries";
import type { FunctionDetail } from "../../api/types";
import { formatAddress, formatOffset } from "../../lib/address";
import { formatBytes, formatCount, formatRate } from "../../lib/format";
import { CfgGraph } from "./CfgGraph";
import { InstructionsPanel } from "./InstructionsPanel";
import { blockSamplesMap, buildCfgModel, layoutCfg, sampleColour, type PositionedNode } from "./cfgModel";

const SAMPLE_WINDOW_S = 10;

export function FunctionPage() {
  const { hostId = "", functionId = "" } = useParams();
  const fid = /^\d+$/.test(functionId) ? Number(functionId) : NaN;
  const valid = Number.isSafeInteger(fid);
  const detail = useFunctionDetail(hostId, fid, valid);
  const hostLink = `/hosts/${encodeURIComponent(hostId)}`;

  if (!valid || (detail.isError && detail.error instanceof ApiError && detail.error.status === 404)) {
    const msg = detail.error?.message === "Host not found" ? "Host not found" : "Function not found";
    return (
      <section className="notice">
        <h1>{msg}</h1>
        <p>
          {msg === "Host not found" ? <Link to="/">Back to the host list</Link> : <Link to={hostLink}>Back to the host</Link>}
        </p>
      </section>
    );
  }
  if (detail.isError) {
    return (
      <section className="notice">
        <h1>Could not load the function</h1>
        <p className="error" role="alert">{detail.error.message}</p>
        <p><Link to={hostLink}>Back to the host</Link></p>
      </section>
    );
  }
  if (!detail.data) return <p className="muted">Loading function…</p>;
  return <FunctionView hostId={hostId} detail={detail.data} />;
}

function FunctionView({ hostId, detail }: { hostId: string; detail: FunctionDetail }) {
  const fn = detail.function;
  const samples = useFunctionSamples(hostId, fn.id, SAMPLE_WINDOW_S);
  const [selected, setSelected] = useState<PositionedNode | null>(null);
  const instructions = useInstructions(hostId, fn.id, selected !== null);

  const sampleMap = useMemo(() => (samples.data ? blockSamplesMap(samples.data.blocks) : null), [samples.data]);
  // The layout depends only on the code; sample counts only recolour it.
  const structure = useMemo(() => layoutCfg(buildCfgModel(detail, null)), [detail]);
  const coloured = useMemo(() => {
    let max = 0;
    const nodes = structure.nodes.map((n) => {
      if (n.kind !== "block" || !n.block) return n;
      const s = sampleMap ? sampleMap.get(n.block.offset) ?? 0 : null;
      if (s !== null) max = Math.max(max, s);
      return { ...n, samples: s };
    });
    return { layout: { ...structure, nodes }, max };
  }, [structure, sampleMap]);
  const colour = useMemo(() => sampleColour(coloured.max), [coloured.max]);
  const onSelect = useCallback((n: PositionedNode) => setSelected(n), []);

  const hostLink = `/hosts/${encodeURIComponent(hostId)}`;
  return (
    <section className="function-page">
      <p className="crumbs"><Link to={hostLink}>← host</Link> · <Link to={`${hostLink}?tab=code`}>code</Link></p>
      <h1>{fn.name}</h1>
      <dl className="facts">
        <div><dt>Module</dt><dd>{fn.module}</dd></div>
        <div><dt>Address</dt><dd className="addr">{formatAddress(fn.address_hex, fn.address)}</dd></div>
        <div><dt>Size</dt><dd>{formatBytes(fn.size)}</dd></div>
        <div><dt>Basic blocks</dt><dd>{fn.block_count}</dd></div>
        <div>
          <dt>Samples/s (last {SAMPLE_WINDOW_S} s)</dt>
          <dd>
            {samples.data
              ? formatRate(samples.data.total / Math.max(1, samples.data.window_s))
              : samples.isError
                ? <span className="unavailable">unavailable <span className="reason">({samples.error.message})</span></span>
                : "…"}
          </dd>
        </div>
      </dl>
      {fn.undecodable && (
        <p className="warning" role="note">
          Undecodable: the agent could not decode this function's bytes
          {detail.undecodable_offset !== null && detail.undecodable_offset !== undefined
            ? ` from offset ${formatOffset(detail.undecodable_offset)}`
            : ""}
          ; code past that point is not in the graph.
        </p>
      )}
      <div className="function-body">
        <div className="cfg-wrap">
          <h2>Control-flow graph</h2>
          {structure.nodes.length === 0 ? (
            <p className="muted">No basic blocks were found.</p>
          ) : (
            <CfgGraph
              layout={coloured.layout}
              hostId={hostId}
              colour={colour}
              maxSamples={coloured.max}
              samplesKnown={sampleMap !== null}
              selected={selected?.id ?? null}
              onSelect={onSelect}
            />
          )}
        </div>
        <InstructionsPanel
          block={selected?.block ?? null}
          blockHex={selected?.addressHex ?? null}
          instructions={instructions.data?.instructions}
          loading={instructions.isFetching && !instructions.data}
          error={instructions.isError ? instructions.error.message : null}
        />
      </div>
      <section className="callees" aria-labelledby="callees-title">
        <h2 id="callees-title">Callees</h2>
        {detail.callees.length === 0 && <p className="muted">No direct calls.</p>}
        {detail.callees.length > 0 && (
          <ul>
            {detail.callees.map((c) => (
              <li key={`${c.site_offset}-${c.target_address_hex ?? c.target_address}`}>
                <span className="muted addr">{formatOffset(c.site_offset)}</span>{" "}
                {c.function_id !== null && c.function_id !== undefined ? (
                  <Link to={`${hostLink}/functions/${c.function_id}`}>{c.name ?? formatAddress(c.target_address_hex, c.target_address)}</Link>
                ) : (
                  <span>{c.name ?? formatAddress(c.target_address_hex, c.target_address)}</span>
                )}
                {c.module && c.module !== fn.module && <span className="muted"> [{c.module}]</span>}
              </li>
            ))}
          </ul>
        )}
        {detail.indirect_call_sites.length > 0 && (
          <p>
            Indirect call sites ({formatCount(detail.indirect_call_sites.length)}):{" "}
            <span className="addr">{detail.indirect_call_sites.map(formatOffset).join(", ")}</span>
          </p>
        )}
      </section>
    </section>
  );
}
