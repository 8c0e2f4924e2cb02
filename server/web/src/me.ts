/** Who is signed in, for every page: what the console shows depends on the role (the API decides). */
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Me } from './api';

export const MeContext = createContext<Me | null>(null);

/** May this principal change things (accept, refuse, cancel)? A viewer may not; the API checks again. */
export const useCanWrite = () => {
  const me = useContext(MeContext);
  return me !== null && me.role !== 'viewer';
};
