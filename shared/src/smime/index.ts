// S/MIME signing and verification of run logs and inventories, and node identities.
export { createNodeIdentity, certificateNodeId, certificateFingerprint, parseCertificates } from './identity.js';
export type { NodeIdentity, NodeIdentityOptions } from './identity.js';
export { signSmime } from './sign.js';
export type { SignOptions } from './sign.js';
export { verifySmime, readSignedContentUnverified, DEFAULT_SMIME_MAX_BYTES } from './verify.js';
export type { VerifiedContent, VerifyOptions } from './verify.js';
