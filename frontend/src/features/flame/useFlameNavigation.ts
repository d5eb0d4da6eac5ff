// SPDX-License-Identifier: Apache-2.0
// What the flame graph and the differential flame graph share around their layout: the frames of the laid
// out tree, the zoomed node found from the URL's path of frame names, the search's matches, and a focus
// handler that writes the zoom back to the URL.
import { useCallback, useMemo } from "react";
import type { HostView } from "../../lib/urlState";
import { findPath, pathOf, search } from "./flameModel";
import type { FlameLayoutState } from "./useFlameLayout";

export function useFlameNavigation(state: FlameLayoutState, view: HostView,
  update: (patch: Partial<HostView>, options?: { push?: boolean }) => void) {
  const layout = state.layout;
  const frames = useMemo(() => state.input?.frames ?? [], [state.input]);
  const focus = useMemo(() => (layout ? findPath(layout, frames, view.flameZoom) : 0), [layout, frames, view.flameZoom]);
  const found = useMemo(() => (layout ? search(layout, frames, view.flameQuery) : null), [layout, frames, view.flameQuery]);
  const onFocus = useCallback((node: number) => {
    if (layout) update({ flameZoom: node > 0 ? pathOf(layout, frames, node) : "" }, { push: true });
  }, [layout, frames, update]);
  return { layout, frames, focus, found, onFocus };
}
