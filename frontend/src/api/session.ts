// SPDX-License-Identifier: Apache-2.0
// The signed-in session: the bearer token and user kept in localStorage so a reload stays signed
// in, plus a tiny subscription so that any 401 from the API sends every screen back to the login
// page at once.
import type { User } from "./types";

const TOKEN_KEY = "hotpath.token";
const USER_KEY = "hotpath.user";

export interface Session {
  token: string;
  user: User | null;
}

type Listener = (session: Session | null) => void;
const listeners = new Set<Listener>();

export function getSession(): Session | null {
  const token = localStorage.getItem(TOKEN_KEY);
  if (!token) return null;
  let user: User | null;
  try {
    const raw = localStorage.getItem(USER_KEY);
    user = raw ? (JSON.parse(raw) as User) : null;
  } catch {
    // A corrupt cached user is not fatal: /auth/me refreshes it.
    user = null;
  }
  return { token, user };
}

export function getToken(): string | null {
  return localStorage.getItem(TOKEN_KEY);
}

export function setSession(session: Session | null): void {
  if (session) {
    localStorage.setItem(TOKEN_KEY, session.token);
    if (session.user) localStorage.setItem(USER_KEY, JSON.stringify(session.user));
    else localStorage.removeItem(USER_KEY);
  } else {
    localStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(USER_KEY);
  }
  for (const l of listeners) l(session);
}

export function onSessionChange(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}
