#!/usr/bin/env node
// Minimal S3-compatible test server that VERIFIES AWS SigV4 (header auth), zero npm deps
// (node's http and crypto only). Used by the remote-shard tests and bench/remote_bench.sh;
// cross-checked against AWS's JavaScript SDK, botocore and curl --aws-sigv4 when written.
// Path-style only: http://127.0.0.1:PORT/<bucket>/<key>; bucket = sub-directory of --root.
// Supports: GET/HEAD object (ETag = "md5", Range a-b / a- / -n -> 206 + Content-Range, 416),
// If-Match (412), If-None-Match (304), PUT object (body sha256 checked), ListObjectsV2 (basic).
// Usage: node s3mock.js --root DIR [--port 0] [--host 127.0.0.1] [--access-key AK]
//        [--secret-key SK] [--session-token TOK] [--region us-east-1] [--port-file F] [--log]
// Prints "s3mock listening 127.0.0.1:PORT" on stdout once ready (and writes PORT to --port-file).
'use strict';
const http = require('http');
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

const args = { root: null, port: '0', host: '127.0.0.1', 'access-key': 'AKIDTEST',
  'secret-key': 'testsecret', 'session-token': '', region: 'us-east-1', 'port-file': '', log: false };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i].replace(/^--/, '');
  if (a === 'log') args.log = true; else args[a] = process.argv[++i];
}
if (!args.root) { console.error('--root required'); process.exit(2); }
const root = path.resolve(args.root);

const sha256 = (b) => crypto.createHash('sha256').update(b).digest('hex');
const hmac = (k, s) => crypto.createHmac('sha256', k).update(s).digest();
const enc = (s, keepSlash) => Array.from(Buffer.from(s, 'utf8')).map((c) => {
  const ch = String.fromCharCode(c);
  return /[A-Za-z0-9\-._~]/.test(ch) || (keepSlash && ch === '/') ? ch
    : '%' + c.toString(16).toUpperCase().padStart(2, '0');
}).join('');
const dec = (s) => { try { return decodeURIComponent(s); } catch { return s; } };
const xmlEsc = (s) => String(s).replace(/[<>&'"]/g, (c) => `&#${c.charCodeAt(0)};`);

function sendError(res, status, code, message, extra = {}, headOnly = false) {
  let body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${xmlEsc(message)}</Message>`;
  for (const [k, v] of Object.entries(extra)) body += `<${k}>${xmlEsc(v)}</${k}>`;
  body += '</Error>';
  res.writeHead(status, { 'Content-Type': 'application/xml', 'Content-Length': headOnly ? 0 : Buffer.byteLength(body),
    'x-amz-request-id': crypto.randomBytes(8).toString('hex') });
  res.end(headOnly ? undefined : body);
}

// Returns null if OK, else [status, code, message, extra].
function verifySigV4(req, rawPath, rawQuery, now) {
  const auth = req.headers['authorization'];
  if (!auth) return [403, 'AccessDenied', 'Access Denied'];
  const m = /^AWS4-HMAC-SHA256 (.*)$/.exec(auth);
  if (!m) return [400, 'InvalidArgument', 'Unsupported Authorization Type'];
  const parts = {};
  for (const kv of m[1].split(',')) {
    const i = kv.indexOf('=');
    parts[kv.slice(0, i).trim()] = kv.slice(i + 1).trim();
  }
  if (!parts.Credential || !parts.SignedHeaders || !parts.Signature)
    return [400, 'AuthorizationHeaderMalformed', 'The authorization header is malformed'];
  const [ak, date, region, service, term] = parts.Credential.split('/');
  if (ak !== args['access-key'])
    return [403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.', { AWSAccessKeyId: ak }];
  if (region !== args.region || service !== 's3' || term !== 'aws4_request')
    return [400, 'AuthorizationHeaderMalformed', `The authorization header is malformed; the region '${region}' is wrong; expecting '${args.region}'`, { Region: args.region }];
  const amzDate = req.headers['x-amz-date'];
  if (!amzDate || !/^\d{8}T\d{6}Z$/.test(amzDate) || amzDate.slice(0, 8) !== date)
    return [403, 'AccessDenied', 'AWS authentication requires a valid Date or x-amz-date header'];
  const t = Date.UTC(+amzDate.slice(0, 4), +amzDate.slice(4, 6) - 1, +amzDate.slice(6, 8),
    +amzDate.slice(9, 11), +amzDate.slice(11, 13), +amzDate.slice(13, 15));
  if (Math.abs(now - t) > 15 * 60 * 1000)
    return [403, 'RequestTimeTooSkewed', 'The difference between the request time and the current time is too large.'];
  const payload = req.headers['x-amz-content-sha256'];
  if (!payload) return [400, 'InvalidRequest', 'Missing required header for this request: x-amz-content-sha256'];
  if (args['session-token'] && req.headers['x-amz-security-token'] !== args['session-token'])
    return [403, 'InvalidToken', 'The provided token is malformed or otherwise invalid.'];
  const signed = parts.SignedHeaders.split(';');
  if (!signed.includes('host')) return [403, 'AccessDenied', 'host must be a signed header'];
  // Canonical headers from rawHeaders (keeps duplicates, in order).
  const hv = {};
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const n = req.rawHeaders[i].toLowerCase();
    const v = req.rawHeaders[i + 1].trim().replace(/\s+/g, ' ');
    hv[n] = n in hv ? hv[n] + ',' + v : v;
  }
  for (const h of signed) if (!(h in hv)) return [403, 'AccessDenied', `signed header ${h} missing`];
  // S3: canonical URI = decoded path re-encoded once ('/' kept); no normalization.
  const curi = enc(dec(rawPath), true);
  const q = rawQuery ? rawQuery.split('&').filter(Boolean).map((kv) => {
    const i = kv.indexOf('=');
    const k = i < 0 ? kv : kv.slice(0, i), v = i < 0 ? '' : kv.slice(i + 1);
    return [enc(dec(k.replace(/\+/g, ' ')), false), enc(dec(v.replace(/\+/g, ' ')), false)];
  }) : [];
  q.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  const creq = [req.method, curi, q.map(([k, v]) => `${k}=${v}`).join('&'),
    signed.map((h) => `${h}:${hv[h]}\n`).join(''), parts.SignedHeaders, payload].join('\n');
  const sts = ['AWS4-HMAC-SHA256', amzDate, `${date}/${region}/s3/aws4_request`, sha256(creq)].join('\n');
  let k = hmac('AWS4' + args['secret-key'], date);
  k = hmac(k, region); k = hmac(k, 's3'); k = hmac(k, 'aws4_request');
  const want = hmac(k, sts).toString('hex');
  const got = parts.Signature;
  if (got.length !== want.length || !crypto.timingSafeEqual(Buffer.from(got), Buffer.from(want)))
    return [403, 'SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided. Check your key and signing method.',
      { AWSAccessKeyId: ak, StringToSign: sts, SignatureProvided: got, CanonicalRequest: creq }];
  return null;
}

const etagCache = new Map();
function etagOf(file, st) {
  const key = `${file}:${st.size}:${st.mtimeMs}`;
  if (!etagCache.has(key)) etagCache.set(key, '"' + crypto.createHash('md5').update(fs.readFileSync(file)).digest('hex') + '"');
  return etagCache.get(key);
}

function listObjects(res, bucket, bdir, query) {
  const prefix = query.get('prefix') || '';
  const keys = [];
  const walk = (d, rel) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const r = rel ? rel + '/' + e.name : e.name;
      if (e.isDirectory()) walk(path.join(d, e.name), r); else if (r.startsWith(prefix)) keys.push(r);
    }
  };
  walk(bdir, '');
  keys.sort();
  let body = `<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>${xmlEsc(bucket)}</Name><Prefix>${xmlEsc(prefix)}</Prefix><KeyCount>${keys.length}</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>`;
  for (const key of keys) {
    const f = path.join(bdir, key), st = fs.statSync(f);
    body += `<Contents><Key>${xmlEsc(key)}</Key><LastModified>${st.mtime.toISOString()}</LastModified><ETag>${xmlEsc(etagOf(f, st))}</ETag><Size>${st.size}</Size><StorageClass>STANDARD</StorageClass></Contents>`;
  }
  body += '</ListBucketResult>';
  res.writeHead(200, { 'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    try { handle(req, res, Buffer.concat(chunks)); } catch (e) { sendError(res, 500, 'InternalError', String(e)); }
  });
});

function handle(req, res, body) {
  const headOnly = req.method === 'HEAD';
  const qi = req.url.indexOf('?');
  const rawPath = qi < 0 ? req.url : req.url.slice(0, qi);
  const rawQuery = qi < 0 ? '' : req.url.slice(qi + 1);
  if (args.log) console.error(`${req.method} ${req.url} range=${req.headers.range || ''} if-match=${req.headers['if-match'] || ''}`);
  const err = verifySigV4(req, rawPath, rawQuery, Date.now());
  if (err) return sendError(res, err[0], err[1], err[2], err[3], headOnly);
  const p = dec(rawPath).replace(/^\//, '');
  const slash = p.indexOf('/');
  const bucket = slash < 0 ? p : p.slice(0, slash);
  const key = slash < 0 ? '' : p.slice(slash + 1);
  const bdir = path.join(root, bucket);
  if (req.method === 'PUT' && !key && /^[a-z0-9][a-z0-9.-]{1,62}$/.test(bucket)) {  // CreateBucket
    if (fs.existsSync(bdir)) return sendError(res, 409, 'BucketAlreadyOwnedByYou', 'Your previous request to create the named bucket succeeded and you already own it.', { BucketName: bucket });
    fs.mkdirSync(bdir); res.writeHead(200, { Location: '/' + bucket, 'Content-Length': 0 }); return res.end();
  }
  if (!bucket || bucket.includes('..') || !fs.existsSync(bdir))
    return sendError(res, 404, 'NoSuchBucket', 'The specified bucket does not exist', { BucketName: bucket }, headOnly);
  if (!key) {
    if (req.method === 'GET') return listObjects(res, bucket, bdir, new URLSearchParams(rawQuery));
    return sendError(res, 405, 'MethodNotAllowed', 'The specified method is not allowed against this resource.');
  }
  const file = path.join(bdir, key);
  if (!file.startsWith(bdir + path.sep)) return sendError(res, 400, 'InvalidArgument', 'bad key');
  if (req.method === 'PUT') {
    const ph = req.headers['x-amz-content-sha256'];
    if (/^[0-9a-f]{64}$/.test(ph) && ph !== sha256(body))
      return sendError(res, 400, 'XAmzContentSHA256Mismatch', "The provided 'x-amz-content-sha256' header does not match what was computed.");
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, body);
    res.writeHead(200, { ETag: etagOf(file, fs.statSync(file)), 'Content-Length': 0 });
    return res.end();
  }
  if (req.method !== 'GET' && !headOnly)
    return sendError(res, 405, 'MethodNotAllowed', 'The specified method is not allowed against this resource.');
  let st;
  try { st = fs.statSync(file); } catch { st = null; }
  if (!st || !st.isFile()) return sendError(res, 404, 'NoSuchKey', 'The specified key does not exist.', { Key: key }, headOnly);
  const etag = etagOf(file, st);
  const base = { ETag: etag, 'Last-Modified': st.mtime.toUTCString(), 'Accept-Ranges': 'bytes',
    'Content-Type': 'application/octet-stream' };
  const ifMatch = req.headers['if-match'];
  if (ifMatch && ifMatch !== '*' && !ifMatch.split(',').map((s) => s.trim()).includes(etag))
    return sendError(res, 412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', { Condition: 'If-Match' }, headOnly);
  const inm = req.headers['if-none-match'];
  if (inm && (inm === '*' || inm.split(',').map((s) => s.trim()).includes(etag))) {
    res.writeHead(304, base); return res.end();
  }
  let start = 0, end = st.size - 1, status = 200;
  const range = req.headers['range'];
  const rm = range && /^bytes=(\d*)-(\d*)$/.exec(range.trim());
  if (rm && (rm[1] !== '' || rm[2] !== '')) {  // malformed/multi ranges are ignored (200), like S3
    if (rm[1] === '') { const n = +rm[2]; start = Math.max(0, st.size - n); if (n === 0) start = st.size; }
    else { start = +rm[1]; if (rm[2] !== '') end = Math.min(+rm[2], st.size - 1); }
    if (start >= st.size || start > end) {
      return sendError(res, 416, 'InvalidRange', 'The requested range is not satisfiable',
        { RangeRequested: range, ActualObjectSize: st.size }, headOnly);
    }
    status = 206;
    base['Content-Range'] = `bytes ${start}-${end}/${st.size}`;
  }
  base['Content-Length'] = end - start + 1;
  res.writeHead(status, base);
  if (headOnly || st.size === 0) return res.end();
  fs.createReadStream(file, { start, end }).pipe(res);
}

server.keepAliveTimeout = 30000;
server.listen(+args.port, args.host, () => {
  const { address, port } = server.address();
  if (args['port-file']) fs.writeFileSync(args['port-file'], String(port));
  console.log(`s3mock listening ${address}:${port}`);
});
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
