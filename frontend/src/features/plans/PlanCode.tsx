// SPDX-License-Identifier: Apache-2.0
// A plan's group functions as code: each member's control-flow graph (laid out by the function view's
// layout worker, so the page never waits on it) with its blocks coloured by the plan — hot blocks by
// chain, cold ones grey — and a member's original disassembly (the agent's InspectFunction, through the
// function route) beside the emitted code's listing.
import { useMemo, useState } from "react";
import { line, curveBasis } from "d3-shape";
import { useFunctionDetail, useFunctionIdAt, useInstructions } from "../../api/queries";
import { buildCfgModel, type PositionedNode } from "../../shared/cfg/cfgModel";
import { EDGE_STYLE } from "../../shared/cfg/cfgStyle";
import { useCfgLayout } from "../../shared/cfg/useCfgLayout";
import { ProbeBadge } from "../../shared/ProbeBadge";
import type { FunctionDetail } from "../../api/types";
import type { ListingLine, MemberView } from "./planModel";

const edgePath = line<{ x: number; y: number }>()
  .x((p) => p.x)
  .y((p) => p.y)
  .curve(curveBasis);

/** One member's CFG coloured by the plan; mounted only while its disclosure is open. */
function MemberCfgBody({ hostId, target, m }: { hostId: string; target: string; m: MemberView }) {
  const id = useFunctionIdAt(hostId, target, m, true);
  const fid = id.data ?? NaN;
  const detail = useFunctionDetail(hostId, fid, Number.isSafeInteger(fid), target);
  if (id.isError || detail.isError)
    return (
      <p className="error small" role="alert">
        {(id.error ?? detail.error)?.message}
      </p>
    );
  if (id.data === null) return <p className="muted small">{m.fn} is not in the target's catalog.</p>;
  if (!detail.data)
    return (
      <p className="muted small" role="status">
        Loading {m.fn}…
      </p>
    );
  return <MemberCfgGraph detail={detail.data} m={m} />;
}

function MemberCfgGraph({ detail, m }: { detail: FunctionDetail; m: MemberView }) {
  const model = useMemo(() => buildCfgModel(detail, null), [detail]);
  const layout = useCfgLayout(model);
  const byOffset = useMemo(() => new Map(m.blocks.map((b) => [b.offset, b])), [m.blocks]);
  if (!layout.layout) {
    return (
      <div className="layout-progress" role="status">
        <span className="small">
          Laying out {m.fn}… {layout.phase}
        </span>
        <progress max={1} value={layout.fraction} aria-label={`${m.fn} layout progress`} />
      </div>
    );
  }
  const l = layout.layout;
  const cls = (n: PositionedNode) => {
    if (n.kind !== "block" || !n.block) return "exit";
    const b = byOffset.get(n.block.offset);
    return b?.hot ? `blk hot c${b.chain % 8}` : "blk cold";
  };
  return (
    <svg
      className="plan-cfg"
      width={Math.min(l.width + 20, 900)}
      viewBox={`-10 -10 ${l.width + 20} ${l.height + 20}`}
      role="img"
      aria-label={`${m.fn}: control-flow graph coloured by the plan`}
    >
      {l.edges.map((e) => (
        <path
          key={e.id}
          d={edgePath(e.points) ?? ""}
          fill="none"
          stroke={EDGE_STYLE[e.kind].stroke}
          strokeDasharray={EDGE_STYLE[e.kind].dash}
        />
      ))}
      {l.nodes.map((n) => {
        const b = n.block ? byOffset.get(n.block.offset) : undefined;
        return (
          <g
            key={n.id}
            data-testid={n.block ? "plan-cfg-block" : "plan-cfg-exit"}
            data-hot={b?.hot ? "1" : "0"}
            transform={`translate(${n.x - n.width / 2},${n.y - n.height / 2})`}
          >
            <rect width={n.width} height={n.height} rx={3} className={cls(n)} />
            <text x={6} y={16} className="small">
              {n.lines[0]}
              {b?.hot ? `  chain ${b.chain}` : ""}
            </text>
            <title>
              {n.block
                ? `+0x${n.block.offset.toString(16)}: ${b?.hot ? `hot, chain ${b.chain}` : "cold"}, count ${b?.count ?? 0}`
                : n.lines.join(" ")}
            </title>
          </g>
        );
      })}
    </svg>
  );
}

export function MemberCfgs({ hostId, target, members }: { hostId: string; target: string; members: MemberView[] }) {
  const [open, setOpen] = useState<Record<string, boolean>>(() => (members[0] ? { [members[0].fn]: true } : {}));
  return (
    <section aria-labelledby="cfgs-title">
      <h2 id="cfgs-title">Control flow of the group</h2>
      <p className="muted small">
        Hot blocks coloured by chain, cold blocks grey; each graph is laid out off the page's thread when opened.
      </p>
      {members.map((m) => (
        <details
          key={m.fn}
          className="plan-member-cfg"
          open={!!open[m.fn]}
          onToggle={(e) => {
            const o = (e.target as HTMLDetailsElement).open;
            setOpen((s) => (s[m.fn] === o ? s : { ...s, [m.fn]: o }));
          }}
        >
          <summary>
            {m.fn}{" "}
            <span className="muted small">
              {m.chains} chain(s), {m.hotBytes} hot bytes, {m.coldBytes} cold
            </span>
          </summary>
          {open[m.fn] && <MemberCfgBody hostId={hostId} target={target} m={m} />}
        </details>
      ))}
    </section>
  );
}

function OriginalListing({ hostId, target, m }: { hostId: string; target: string; m: MemberView }) {
  const id = useFunctionIdAt(hostId, target, m, true);
  const fid = id.data ?? NaN;
  const ins = useInstructions(hostId, fid, Number.isSafeInteger(fid), target);
  if (id.isError || ins.isError)
    return (
      <p className="error small" role="alert">
        {(id.error ?? ins.error)?.message}
      </p>
    );
  if (id.data === null) return <p className="muted small">{m.fn} is not in the target's catalog.</p>;
  if (!ins.data)
    return (
      <p className="muted small" role="status">
        Asking the agent to decode {m.fn}…
      </p>
    );
  const probed = ins.data.instructions.filter((i) => i.probe).length;
  return (
    <>
      {probed > 0 && (
        <p className="muted small" data-testid="original-probe-note">
          A running measurement's probe sits on {probed} instruction(s) of {m.fn}, marked probe; the bytes shown are the
          program's own.
        </p>
      )}
      <table className="data listing" data-testid="original-listing">
        <thead>
          <tr>
            <th>Offset</th>
            <th>Address</th>
            <th>Bytes</th>
            <th>Instruction</th>
          </tr>
        </thead>
        <tbody>
          {ins.data.instructions.slice(0, 5000).map((i) => (
            <tr key={i.offset} className={i.probe ? "probed" : undefined}>
              <td className="addr">{`${m.fn}+0x${i.offset.toString(16)}`}</td>
              <td className="addr">{i.address_hex}</td>
              <td className="addr">{i.bytes}</td>
              <td>
                {i.text}
                {i.probe && (
                  <>
                    {" "}
                    <ProbeBadge />
                  </>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

/** The emitted code beside the original of a chosen member (the root first). */
export function CodeSideBySide({
  hostId,
  target,
  members,
  listing,
}: {
  hostId: string;
  target: string;
  members: MemberView[];
  listing: ListingLine[];
}) {
  const [which, setWhich] = useState(members[0]?.fn ?? "");
  const m = members.find((x) => x.fn === which) ?? members[0];
  return (
    <div className="code-side-by-side">
      <div>
        <h3>
          Original{" "}
          <select aria-label="Original function" value={m?.fn ?? ""} onChange={(e) => setWhich(e.target.value)}>
            {members.map((x) => (
              <option key={x.fn} value={x.fn}>
                {x.fn}
              </option>
            ))}
          </select>
        </h3>
        {m ? <OriginalListing key={m.fn} hostId={hostId} target={target} m={m} /> : <p className="muted">No group.</p>}
      </div>
      <div>
        <h3>Emitted</h3>
        <table className="data listing" data-testid="code-listing">
          <thead>
            <tr>
              <th>Address</th>
              <th>Bytes</th>
              <th>Instruction</th>
              <th>Original</th>
            </tr>
          </thead>
          <tbody>
            {listing.slice(0, 5000).map((l, i) => (
              <tr key={i} className={m && l.from.startsWith(`${m.fn}+`) ? "of-chosen" : undefined}>
                <td className="addr">{l.address}</td>
                <td className="addr">{l.bytes}</td>
                <td>{l.text}</td>
                <td className="addr">{l.from}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </div>
  );
}
