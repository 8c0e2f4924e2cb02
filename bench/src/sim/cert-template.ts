/**
 * Certificates for many node ids under one key, made from a template: the first certificate is
 * made whole (shared/smime/identity.ts createNodeIdentity), and every next one is its DER with
 * the serial number, the subject and the issuer (the node id, a UTF8String of the same length)
 * replaced, then its TBSCertificate signed again with node:crypto. Nothing else in the
 * certificate depends on the node id, and the lengths do not change, so every DER length stays
 * right. It is what makes a 100,000-node fleet's identities take seconds per core, not minutes
 * (building each certificate with forge cost ~4 ms, the signature alone ~0.5 ms).
 *
 * A node id of another length, or a template in which the id is not found exactly twice, is
 * made whole instead: the shortcut never produces a certificate it cannot stand behind.
 */
import { createPrivateKey, randomBytes, sign, type KeyObject } from 'node:crypto';
import { createNodeIdentity } from '@capstan/shared/smime/identity';

/** Offset of a DER element's content and its end, for the element starting at `at`. */
function derElement(der: Buffer, at: number): { content: number; end: number } {
  const first = der[at + 1]!;
  if (first < 0x80) return { content: at + 2, end: at + 2 + first };
  const n = first & 0x7f;
  let len = 0;
  for (let k = 0; k < n; k++) len = len * 256 + der[at + 2 + k]!;
  return { content: at + 2 + n, end: at + 2 + n + len };
}

function pemOf(der: Buffer): string {
  const b64 = der.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n$/, '');
  return `-----BEGIN CERTIFICATE-----\n${b64}\n-----END CERTIFICATE-----\n`;
}

/** Every offset where `needle` occurs in `hay`. */
function occurrences(hay: Buffer, needle: Buffer): number[] {
  const out: number[] = [];
  for (let at = hay.indexOf(needle); at !== -1; at = hay.indexOf(needle, at + 1)) out.push(at);
  return out;
}

export class CertTemplate {
  private readonly key: KeyObject;
  private template: {
    der: Buffer;
    tbs: { start: number; end: number };
    serial: { at: number; length: number };
    ids: number[];
    idLength: number;
    sigLength: number;
  } | null = null;

  constructor(private readonly keyPem: string) {
    this.key = createPrivateKey(keyPem);
  }

  /** A self-signed certificate (PEM) for `nodeId` under this template's key. */
  issue(nodeId: string): string {
    const id = Buffer.from(nodeId, 'utf8');
    const t = this.template;
    if (t === null || id.length !== t.idLength) return this.whole(nodeId, t === null);
    const der = Buffer.from(t.der);
    // A fresh serial of the same length, first byte as identity.ts makes it: positive, no leading zero.
    const serial = randomBytes(t.serial.length);
    serial[0] = (serial[0]! & 0x7f) | 0x40;
    serial.copy(der, t.serial.at);
    for (const at of t.ids) id.copy(der, at);
    sign('sha256', der.subarray(t.tbs.start, t.tbs.end), this.key).copy(der, der.length - t.sigLength);
    return pemOf(der);
  }

  /** A certificate made whole; the first one becomes the template. */
  private whole(nodeId: string, keep: boolean): string {
    const pem = createNodeIdentity(nodeId, { keyPem: this.keyPem }).certPem;
    if (keep) this.template = templateOf(pem, nodeId);
    return pem;
  }
}

function templateOf(pem: string, nodeId: string): CertTemplate['template'] {
  const der = Buffer.from(pem.replace(/-----[A-Z ]+-----|\s/g, ''), 'base64');
  const cert = derElement(der, 0);
  const tbs = derElement(der, cert.content);
  // TBSCertificate: [0] version, then the serial number's INTEGER.
  let at = tbs.content;
  if (der[at] === 0xa0) at = derElement(der, at).end;
  if (der[at] !== 0x02) return null;
  const serial = derElement(der, at);
  const ids = occurrences(der.subarray(0, tbs.end), Buffer.from(nodeId, 'utf8'));
  // The signature: the certificate's last element, a BIT STRING whose content is 0x00 then the signature.
  const sigAlg = derElement(der, tbs.end);
  if (der[sigAlg.end] !== 0x03) return null;
  const bits = derElement(der, sigAlg.end);
  if (ids.length !== 2 || bits.end !== der.length) return null;
  return {
    der, tbs: { start: cert.content, end: tbs.end }, serial: { at: serial.content, length: serial.end - serial.content },
    ids, idLength: Buffer.byteLength(nodeId), sigLength: bits.end - bits.content - 1,
  };
}
