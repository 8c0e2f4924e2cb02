/** Object identifiers S/MIME signing and verification use, and the digests they name. */

export const OID = {
  data: '1.2.840.113549.1.7.1',
  signedData: '1.2.840.113549.1.7.2',
  contentType: '1.2.840.113549.1.9.3',
  messageDigest: '1.2.840.113549.1.9.4',
  signingTime: '1.2.840.113549.1.9.5',
  smimeCapabilities: '1.2.840.113549.1.9.15',
  rsaEncryption: '1.2.840.113549.1.1.1',
  sha256WithRSAEncryption: '1.2.840.113549.1.1.11',
  sha256: '2.16.840.1.101.3.4.2.1',
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  userId: '0.9.2342.19200300.100.1.1',
  subjectKeyIdentifier: '2.5.29.14',
} as const;

/** Digest algorithms accepted in a SignerInfo, by OID → node:crypto hash name. */
export const DIGESTS: ReadonlyMap<string, string> = new Map([
  ['1.3.14.3.2.26', 'sha1'],
  ['2.16.840.1.101.3.4.2.4', 'sha224'],
  [OID.sha256, 'sha256'],
  ['2.16.840.1.101.3.4.2.2', 'sha384'],
  ['2.16.840.1.101.3.4.2.3', 'sha512'],
]);

/**
 * Signature algorithms accepted in a SignerInfo → the key type they need. The hash always comes
 * from the SignerInfo's digestAlgorithm (as OpenSSL does); PKCS#1 v1.5 embeds the hash OID in the
 * signature, so a mismatch cannot verify anyway.
 */
export const SIGNATURES: ReadonlyMap<string, 'rsa' | 'ec'> = new Map([
  [OID.rsaEncryption, 'rsa'],
  ['1.2.840.113549.1.1.5', 'rsa'], // sha1WithRSAEncryption
  ['1.2.840.113549.1.1.14', 'rsa'], // sha224WithRSAEncryption
  [OID.sha256WithRSAEncryption, 'rsa'],
  ['1.2.840.113549.1.1.12', 'rsa'], // sha384WithRSAEncryption
  ['1.2.840.113549.1.1.13', 'rsa'], // sha512WithRSAEncryption
  ['1.2.840.10045.4.1', 'ec'], // ecdsa-with-SHA1
  [OID.ecdsaWithSha256, 'ec'],
  ['1.2.840.10045.4.3.3', 'ec'], // ecdsa-with-SHA384
  ['1.2.840.10045.4.3.4', 'ec'], // ecdsa-with-SHA512
]);

/** Signature algorithms that name SHA-1 whatever the digestAlgorithm says (refused like a SHA-1 digest). */
export const SHA1_SIGNATURES: ReadonlySet<string> = new Set(['1.2.840.113549.1.1.5', '1.2.840.10045.4.1']);
