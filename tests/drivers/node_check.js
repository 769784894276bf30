// node-postgres (pg, tests/drivers/package.json) against weir: simple and
// extended queries, named prepared statements, type parsing, transactions
// with a savepoint, errors with their SQLSTATE, and a pool.
// Usage: node node_check.js <postgres url>
"use strict";
const assert = require("node:assert/strict");
const { Client, Pool } = require("pg");

async function main(url) {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await checkStatements(client);
    await checkTypes(client);
    await checkTransactions(client);
    await checkErrors(client);
  } finally {
    await client.query("DROP TABLE IF EXISTS node_t");
    await client.end();
  }
  await checkPool(url);
  console.log("node-postgres ok");
}

async function checkStatements(client) {
  const version = await client.query("SELECT version()");
  assert.match(version.rows[0].version, /^PostgreSQL \d+\.\d+ /);
  await client.query("CREATE TABLE node_t (id BIGINT PRIMARY KEY, label TEXT, score DOUBLE PRECISION)");
  const inserted = await client.query(
    "INSERT INTO node_t VALUES ($1, $2, $3), ($4, $5, $6)",
    [1, "one", 1.5, 2, "two", null],
  );
  assert.equal(inserted.rowCount, 2);
  const named = { name: "node_by_id", text: "SELECT label FROM node_t WHERE id = $1", values: [2] };
  assert.deepEqual((await client.query(named)).rows, [{ label: "two" }]);
  assert.deepEqual((await client.query({ ...named, values: [1] })).rows, [{ label: "one" }]);
  const rows = await client.query({ text: "SELECT id, label, score FROM node_t ORDER BY id", rowMode: "array" });
  assert.deepEqual(rows.rows, [["1", "one", 1.5], ["2", "two", null]]);
  assert.deepEqual(rows.fields.map((field) => field.name), ["id", "label", "score"]);
}

async function checkTypes(client) {
  const result = await client.query(
    "SELECT 42::INT AS i, 9007199254740993::BIGINT AS b, true AS t, 1.25::NUMERIC(5,2) AS n, " +
      "TIMESTAMPTZ '2026-01-02 03:04:05+00' AS at, DATE '2026-01-02' AS d, " +
      "INTERVAL '1 day 2 hours' AS span, ARRAY[1, 2, 3]::INT[] AS list, 'x''y' AS quoted",
  );
  const row = result.rows[0];
  assert.equal(row.i, 42);
  assert.equal(row.b, "9007199254740993");
  assert.equal(row.t, true);
  assert.equal(row.n, "1.25");
  assert.equal(row.at.toISOString(), "2026-01-02T03:04:05.000Z");
  assert.deepEqual(row.list, [1, 2, 3]);
  assert.equal(row.quoted, "x'y");
  assert.equal(row.span.days, 1);
  assert.equal(row.span.hours, 2);
}

async function checkTransactions(client) {
  await client.query("BEGIN");
  await client.query("INSERT INTO node_t VALUES (3, 'three', 3.0)");
  await client.query("SAVEPOINT s");
  await client.query("INSERT INTO node_t VALUES (4, 'four', 4.0)");
  await client.query("ROLLBACK TO SAVEPOINT s");
  await client.query("COMMIT");
  await client.query("BEGIN");
  await client.query("INSERT INTO node_t VALUES (5, 'five', 5.0)");
  await client.query("ROLLBACK");
  const ids = await client.query({ text: "SELECT id FROM node_t ORDER BY id", rowMode: "array" });
  assert.deepEqual(ids.rows.map((row) => row[0]), ["1", "2", "3"]);
}

async function checkErrors(client) {
  await assert.rejects(client.query("SELECT * FROM node_missing"), (error) => error.code === "42P01");
  await assert.rejects(client.query("INSERT INTO node_t VALUES (1, 'again', 0)"), (error) => error.code === "23505");
  await assert.rejects(client.query("SELECT 1/0"), (error) => error.code === "22012");
  // The connection stays usable after each error.
  assert.equal((await client.query("SELECT count(*)::INT AS n FROM node_t")).rows[0].n, 3);
}

async function checkPool(url) {
  const pool = new Pool({ connectionString: url, max: 4 });
  const answers = await Promise.all(
    [1, 2, 3, 4, 5, 6, 7, 8].map((n) => pool.query("SELECT $1::INT + $1::INT AS doubled", [n])),
  );
  assert.deepEqual(answers.map((answer) => answer.rows[0].doubled), [2, 4, 6, 8, 10, 12, 14, 16]);
  await pool.end();
}

main(process.argv[2]).catch((error) => {
  console.error(error);
  process.exit(1);
});
