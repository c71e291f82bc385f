#!/usr/bin/env node
// The S3 of the remote-shard tests: s3rver (an S3-compatible server that
// checks AWS Signature Version 4 with the secret keys it knows), filled
// through AWS's own JavaScript client, so neither the signatures that are
// checked nor those that upload come from our signer.
//
//   node tests/s3/s3.js serve --root DIR --port-file FILE
//        [--access-key ID --secret-key KEY]...
//     Serves on 127.0.0.1 (a free port, written to FILE once every object
//     is uploaded): each sub-directory of DIR becomes a bucket and each file
//     below it an object (its path under the bucket is the key). Runs until
//     SIGTERM.
//   node tests/s3/s3.js put --endpoint URL --access-key ID --secret-key KEY
//        --bucket B --key K --file PATH
//     Uploads one object (to replace it while a test reads it).
//   node tests/s3/s3.js get --endpoint URL --access-key ID --secret-key KEY
//        --bucket B --key K --file PATH
//     Downloads one object into PATH (to check what a test uploaded).
//
// Installed by scripts/deps.sh (`npm ci` in tests/s3).
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const S3rver = require('@20minutes/s3rver');
const AWSAccount = require('@20minutes/s3rver/lib/models/account');
const { S3Client, PutObjectCommand, GetObjectCommand } = require('@aws-sdk/client-s3');

function parseArgs(argv) {
  const args = { keys: [] };
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '');
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`--${name} needs a value`);
    if (name === 'access-key') args.keys.push({ id: value });
    else if (name === 'secret-key') args.keys[args.keys.length - 1].secret = value;
    else args[name] = value;
  }
  return args;
}

function client(endpoint, key) {
  return new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: key.id, secretAccessKey: key.secret },
    // s3rver predates the checksum headers that newer SDKs add by default.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}

// filesUnder lists the files below `dir` (following symbolic links) as
// {key, file}, keys relative to `dir`.
function filesUnder(dir, prefix = '') {
  const out = [];
  for (const name of fs.readdirSync(dir)) {
    const file = path.join(dir, name);
    const stat = fs.statSync(file);
    if (stat.isDirectory()) out.push(...filesUnder(file, prefix + name + '/'));
    else if (stat.isFile()) out.push({ key: prefix + name, file });
  }
  return out;
}

async function serve(args) {
  // s3rver keeps its own copy of the objects; the test's tree is only read.
  const store = fs.mkdtempSync(path.join(os.tmpdir(), 'wds-s3rver-'));
  const account = new AWSAccount(111122223333, 'wds-test');
  for (const key of args.keys) account.createKeyPair(key.id, key.secret);
  const buckets = fs
    .readdirSync(args.root)
    .filter((name) => fs.statSync(path.join(args.root, name)).isDirectory());
  // Buckets are made by the server itself: s3rver signs a bucket request's
  // path without its trailing slash, unlike AWS and its SDK (PUT /bucket/),
  // so a CreateBucket from the SDK fails its own signature check. Object
  // requests, all the tests use, are checked as S3 checks them.
  const server = new S3rver({
    address: '127.0.0.1',
    port: 0,
    directory: store,
    silent: true,
    configureBuckets: buckets.map((name) => ({ name })),
  });
  const { port } = await server.run();
  const endpoint = `http://127.0.0.1:${port}`;
  const s3 = client(endpoint, args.keys[0]);
  for (const bucket of buckets) {
    for (const { key, file } of filesUnder(path.join(args.root, bucket))) {
      await s3.send(
        new PutObjectCommand({ Bucket: bucket, Key: key, Body: fs.readFileSync(file) }),
      );
    }
  }
  fs.writeFileSync(args['port-file'] + '.tmp', String(port));
  fs.renameSync(args['port-file'] + '.tmp', args['port-file']);
  const stop = () => {
    const exit = () => {
      fs.rmSync(store, { recursive: true, force: true });
      process.exit(0);
    };
    server.close(exit);
    // close() waits for open connections; a client's idle keep-alive one
    // must not hold the test up.
    setTimeout(exit, 1000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

async function put(args) {
  const s3 = client(args.endpoint, args.keys[0]);
  await s3.send(
    new PutObjectCommand({ Bucket: args.bucket, Key: args.key, Body: fs.readFileSync(args.file) }),
  );
}

async function get(args) {
  const s3 = client(args.endpoint, args.keys[0]);
  const answer = await s3.send(new GetObjectCommand({ Bucket: args.bucket, Key: args.key }));
  fs.writeFileSync(args.file, await answer.Body.transformToByteArray());
}

const [command, ...rest] = process.argv.slice(2);
const commands = { serve, put, get };
if (!commands[command]) {
  console.error('usage: s3.js serve|put|get ...');
  process.exit(2);
}
commands[command](parseArgs(rest)).catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
