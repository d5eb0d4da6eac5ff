// SPDX-License-Identifier: Apache-2.0
// What the flame graph and the differential flame graph share around their layout: the frames of the laid
// out tree, the zoomed node found from the URL's path of frame names, the search's matches, and a focus
// handler that writes the zoom back to the URL. Each graph has its own search and zoom in the URL (the
// flame tab's fq/fzoom, the differential graph's dq/dzoom), so one's state never leaks into the other.
import { useCallback, useMemo } from "react";
import type { HostView } from "../../lib/urlState";
import { findPath, pathOf, search } from "./flameModel";
import type { FlameLayoutState } from "./useFlameLayout";

/** Which of the view's fields hold a graph's search and zoom. */
export const FLAME_NAV = { query: "flameQuery", zoom: "flameZoom" } as const;
export const DIFF_NAV = { query: "diffQuery", zoom: "diffZoom" } as const;
export type FlameNavFields = typeof FLAME_NAV | typeof DIFF_NAV;

export function useFlameNavigation(
  state: Pick<FlameLayoutState, "layout" | "frames">,
  view: HostView,
  update: (patch: Partial<HostView>, options?: { push?: boolean }) => void,
  fields: FlameNavFields = FLAME_NAV,
) {
  const layout = state.layout;
  const frames = state.frames;
  const zoom = view[fields.zoom];
  const query = view[fields.query];
  const focus = useMemo(() => (layout ? findPath(layout, frames, zoom) : 0), [layout, frames, zoom]);
  const found = useMemo(() => (layout ? search(layout, frames, query) : null), [layout, frames, query]);
  const onFocus = useCallback(
    (node: number) => {
      if (layout) update({ [fields.zoom]: node > 0 ? pathOf(layout, frames, node) : "" }, { push: true });
    },
    [layout, frames, update, fields.zoom],
  );
  return { layout, frames, focus, found, onFocus };
}
