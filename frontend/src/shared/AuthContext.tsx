// SPDX-License-Identifier: Apache-2.0
// The session as React state: sign in through the API, sign out, and follow session changes made
// elsewhere (a 401 anywhere clears the session and the routes send the user to the login page).
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { getSession, onSessionChange, setSession, type Session } from "../api/session";

interface AuthValue {
  session: Session | null;
  signIn: (username: string, password: string) => Promise<void>;
  signOut: () => void;
}

const AuthContext = createContext<AuthValue | null>(null);

export function AuthProvider({ children }: { children: ReactNode }) {
  const [session, setState] = useState<Session | null>(() => getSession());
  const qc = useQueryClient();
  useEffect(() => onSessionChange(setState), []);
  const signIn = useCallback(
    async (username: string, password: string) => {
      const token = await unwrap(api.POST("/api/v1/auth/login", { body: { username, password } }));
      qc.clear();
      setSession({ token: token.access_token, user: token.user });
    },
    [qc],
  );
  const signOut = useCallback(() => {
    setSession(null);
    qc.clear();
  }, [qc]);
  const value = useMemo(() => ({ session, signIn, signOut }), [session, signIn, signOut]);
  return <AuthContext.Provider value={value}>{children}</AuthContext.Provider>;
}

export function useAuth(): AuthValue {
  const v = useContext(AuthContext);
  if (!v) throw new Error("useAuth outside AuthProvider");
  return v;
}
