// SPDX-License-Identifier: Apache-2.0
// Stack definitions kept by id in the flame worker for the page's life: a view's reply carries each
// stack's samples by id (/flamegraph/stacks), and only the stacks not kept yet are asked for
// (/flamegraph/definitions), so a second view of an hour sends counts, not the megabytes of its frames.
// A stack id names its frames for good (content-addressed); a stack with a kernel frame not named yet
// (its catalog piece not stored) is used but asked for again next time. Pure, unit tested.
import type { FlameDefinitionsData, FlameStacksData } from "../../api/types";
import type { FlameFrame } from "./flameModel";
import type { FlamePaths } from "./flameTree";

/** Stacks kept before the cache starts again (an hour of a busy host holds tens of thousands). */
export const MAX_STACKS = 400_000;

export class StackCache {
  private frames: FlameFrame[] = [];
  private frameIndex = new Map<string, number>();
  /** Per host and stack id: its frames (indices into `frames`), root first. */
  private stacks = new Map<string, Int32Array>();
  /** Stacks kept with a frame not named yet. */
  private unnamed = new Set<string>();

  constructor(private readonly limit = MAX_STACKS) {}

  get size(): number {
    return this.stacks.size;
  }

  /** The ids of these stacks that must be asked for. */
  missing(hostId: string, ids: readonly string[]): string[] {
    if (this.stacks.size > this.limit) this.clear();
    return ids.filter((id) => {
      const key = `${hostId}/${id}`;
      return !this.stacks.has(key) || this.unnamed.has(key);
    });
  }

  /** Keep the definitions of a /flamegraph/definitions reply. */
  define(hostId: string, defs: FlameDefinitionsData): void {
    const local = defs.frames.map((f) => {
      const key = `${f.kind}\0${f.module}\0${f.name}\0${f.function_id ?? ""}`;
      let i = this.frameIndex.get(key);
      if (i === undefined) {
        i = this.frames.length;
        this.frameIndex.set(key, i);
        this.frames.push(f);
      }
      return i;
    });
    const { id, length, frame } = defs.stacks;
    let at = 0;
    for (let k = 0; k < id.length; k++) {
      const path = new Int32Array(length[k]);
      let named = true;
      for (let j = 0; j < length[k]; j++, at++) {
        const f = defs.frames[frame[at]];
        named &&= f.kind !== "kernel" || f.function_id !== null;
        path[j] = local[frame[at]];
      }
      const key = `${hostId}/${id[k]}`;
      this.stacks.set(key, path);
      if (named) this.unnamed.delete(key);
      else this.unnamed.add(key);
    }
  }

  /** A view's stacks as the tree's paths (stacks without a kept definition are left out), with the
   *  frames they use, numbered in order of first use. */
  paths(hostId: string, counts: FlameStacksData["stacks"]): { frames: FlameFrame[]; paths: FlamePaths } {
    const frames: FlameFrame[] = [];
    // Each kept frame's number in this view (-1: not used yet), an array rather than a Map: a view of
    // an hour looks up ~400,000 frames.
    const local = new Int32Array(this.frames.length).fill(-1);
    const kept: Int32Array[] = [];
    const length: number[] = [];
    const samples: number[] = [];
    let steps = 0;
    for (let k = 0; k < counts.id.length; k++) {
      const path = this.stacks.get(`${hostId}/${counts.id[k]}`);
      if (!path) continue;
      kept.push(path);
      steps += path.length;
      length.push(path.length);
      samples.push(counts.samples[k]);
    }
    const frame: number[] = new Array<number>(steps);
    let at = 0;
    for (const path of kept)
      for (let j = 0; j < path.length; j++) {
        const g = path[j];
        let i = local[g];
        if (i === -1) {
          i = local[g] = frames.length;
          frames.push(this.frames[g]);
        }
        frame[at++] = i;
      }
    return { frames, paths: { frame, length, samples } };
  }

  clear(): void {
    this.frames = [];
    this.frameIndex.clear();
    this.stacks.clear();
    this.unnamed.clear();
  }
}
