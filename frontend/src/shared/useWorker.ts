// SPDX-License-Identifier: Apache-2.0
// Runs a job in a Web Worker so the page never blocks: the job's message goes out with a fresh id, and
// only replies carrying that id (progress, then the result) reach the caller; a newer job or unmounting
// ends the older one. Where no Worker exists (unit tests in jsdom) the job runs in a macrotask instead.
import { useEffect, useRef } from "react";

export interface WorkerJob<Req, Reply> {
  /** The job's message (the worker receives it with the `id` its replies must carry). */
  request: Req;
  /** Called when the job starts, before the worker has it (e.g. to show a busy state). */
  start?: () => void;
  /** Each reply of this job; return true on its last one (the worker is then ended unless kept). */
  onReply: (reply: Reply) => boolean;
  /** A failure of the worker itself (an error the worker script did not catch). */
  onError?: (message: string) => void;
  /** The same job on this thread, where no Worker exists. */
  inline: () => void;
}

let nextId = 1;

/** Runs `job` whenever it changes (build it with useMemo on its inputs; null runs nothing). `create`
 *  must be a module-level function `() => new Worker(new URL("./x.worker.ts", import.meta.url), { type:
 *  "module" })`: Vite finds and bundles the worker only where that expression is written. With `keep`,
 *  one worker serves every job of the component (for jobs that come often); otherwise each job has its
 *  own. */
export function useWorker<Req extends object, Reply extends { id: number }>(
  create: () => Worker,
  job: WorkerJob<Req, Reply> | null,
  keep = false,
): void {
  const kept = useRef<Worker | null>(null);
  useEffect(
    () => () => {
      kept.current?.terminate();
      kept.current = null;
    },
    [],
  );
  useEffect(() => {
    if (!job) return;
    job.start?.();
    if (typeof Worker === "undefined") {
      const timer = setTimeout(job.inline, 0);
      return () => clearTimeout(timer);
    }
    const id = nextId++;
    const worker = keep ? (kept.current ??= create()) : create();
    worker.onmessage = (ev: MessageEvent<Reply>) => {
      if (ev.data.id !== id) return;
      if (job.onReply(ev.data) && !keep) worker.terminate();
    };
    worker.onerror = (ev) => job.onError?.(ev.message);
    worker.postMessage({ id, ...job.request });
    return keep ? undefined : () => worker.terminate();
  }, [create, job, keep]);
}
