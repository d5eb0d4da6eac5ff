// SPDX-License-Identifier: Apache-2.0
// Ids of the console's records as the backend makes them.

/** A UUID as the backend writes plan and roll-out ids: 0b6f4c1e-8a3d-4f7a-9c2e-5d1b7e9a4f20. */
export function isUuid(id: string): boolean {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id);
}
