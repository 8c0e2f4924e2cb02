/** Split a byte stream into text lines, each bounded: a peer (agent, relay) cannot make the reader buffer without end. */
import { StringDecoder } from 'node:string_decoder';

/** Longest line kept; longer ones are dropped whole (their start is discarded as it arrives). */
export const MAX_LINE = 64 * 1024;

export async function* jsonLines(stream: AsyncIterable<Buffer | string>, maxLine = MAX_LINE): AsyncGenerator<string> {
  let buf = '';
  let skipping = false;
  // A multi-byte character may straddle two chunks: decode across them.
  const decoder = new StringDecoder('utf8');
  for await (const chunk of stream) {
    buf += typeof chunk === 'string' ? chunk : decoder.write(chunk);
    let nl: number;
    while ((nl = buf.indexOf('\n')) !== -1) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (skipping) {
        skipping = false;
        continue;
      }
      if (line.trim() !== '') yield line;
    }
    if (buf.length > maxLine) {
      buf = '';
      skipping = true;
    }
  }
  if (!skipping && buf.trim() !== '') yield buf;
}
