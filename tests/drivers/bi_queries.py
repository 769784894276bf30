# Catalogue of the connect/sync queries of Grafana's and Metabase's Postgres data sources
# (compared between Postgres 15 and weir in docs/bi-tool-queries.md; run by bi_queries_check.py).
# Each entry: tool, name, purpose, cite (list of (repo, path, commit)), sql (as sent; $n placeholders),
# params (values bound to $n, as the client binds them), proto ('simple' or 'extended'), note.

GRAFANA_TS = ("grafana/grafana", "public/app/plugins/datasource/grafana-postgresql-datasource/postgresMetaQuery.ts",
              "12f912ab8d010f4d95a4043a0efaa20fc4ca0100")
GRAFANA_DS = ("grafana/grafana", "public/app/plugins/datasource/grafana-postgresql-datasource/datasource.ts",
              "04282cd93150390a7d83089cc520d96546d576a8")
GRAFANA_AUTODETECT = ("grafana/grafana",
                      "public/app/plugins/datasource/grafana-postgresql-datasource/configuration/useAutoDetectFeatures.ts",
                      "3af0110a1a2192523521267b47ee6fede2c8ec57")
GRAFANA_SCHEMA_GO = ("grafana/grafana", "pkg/tsdb/grafana-postgresql-datasource/schema.go",
                     "043dd88a47944c35205994c4da317e100dc9b12e")
GRAFANA_LEGACY = ("grafana/grafana", "public/app/plugins/datasource/postgres/meta_query.ts",
                  "027e669f230fd8228b4376f13363058b5bcd2f35")
GRAFANA_MACROS = ("grafana/grafana", "pkg/tsdb/grafana-postgresql-datasource/macros.go",
                  "02ab314b81e2adc656bd7d08cc0533304a0037ff")

MB_PG = ("metabase/metabase", "src/metabase/driver/postgres.clj", "008fd6675457cdd62da2265628bed3b725a607ea")
MB_CONN = ("metabase/metabase", "src/metabase/driver/sql_jdbc/connection.clj", "003c3790a0ccacc317ee8db0301736ed79db60f3")
MB_EXEC = ("metabase/metabase", "src/metabase/driver/sql_jdbc/execute.clj", "0041072d8fccaf81c6fbc2982a78bd347f6acafd")
MB_DESCDB = ("metabase/metabase", "src/metabase/driver/sql_jdbc/sync/describe_database.clj",
             "00f84ab8adde06abf9ac93e22f7d6dbbf5e089de")
MB_DESCTBL = ("metabase/metabase", "src/metabase/driver/sql_jdbc/sync/describe_table.clj",
              "00c37c6669cda403ee73601d8d7c8b2926d3de42")
PGJDBC = ("pgjdbc/pgjdbc", "pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java",
          "2f39510765a0f9ef803a1765b2f063b11fb82be2")
PGJDBC_NOTE = ("SQL text captured verbatim from pgjdbc 42.5.5 (Debian libpostgresql-jdbc-java) with loggerLevel=TRACE, "
               "calling the DatabaseMetaData method named; Metabase bundles a newer pgjdbc whose text differs slightly "
               "(e.g. current_database() AS TABLE_CAT).")


def schema_constraint():
    # buildSchemaConstraint() in postgresMetaQuery.ts, whitespace as in the source
    return """
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""


def grafana_show_tables():
    c = schema_constraint()
    return f"""SELECT
    CASE WHEN {c}
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
    ORDER BY CASE WHEN {c} THEN 0 ELSE 1 END, 1"""


def grafana_show_tables_schema(schema):
    part = "'" + schema.replace("'", "''") + "'"
    return f"""SELECT quote_ident(table_name) AS "table"
      FROM information_schema.tables
      WHERE quote_ident(table_schema) = {part}
      ORDER BY 1"""


def grafana_get_schema(table):
    t = "'" + table.replace("'", "''") + "'"
    return f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident({t}),1) = 2
        THEN quote_ident(table_schema) = (parse_ident({t}))[1]
          AND quote_ident(table_name) = (parse_ident({t}))[2]
        ELSE quote_ident(table_name) = {t}
          AND {schema_constraint()}
      END"""


LEGACY_SC = """
table_schema IN (
  SELECT
    CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
  FROM
    generate_series(
      array_lower(string_to_array(current_setting('search_path'),','),1),
      array_upper(string_to_array(current_setting('search_path'),','),1)
    ) as i,
    string_to_array(current_setting('search_path'),',') s
)"""


def legacy_find_metric_table():
    q = """
SELECT
\tquote_ident(table_name) as table_name,
\t( SELECT
\t    quote_ident(column_name) as column_name
\t  FROM information_schema.columns c
    WHERE
      c.table_schema = t.table_schema AND
      c.table_name = t.table_name AND
      udt_name IN ('timestamptz','timestamp')
    ORDER BY ordinal_position LIMIT 1
  ) AS time_column,
  ( SELECT
      quote_ident(column_name) AS column_name
    FROM information_schema.columns c
    WHERE
      c.table_schema = t.table_schema AND
      c.table_name = t.table_name AND
      udt_name='float8'
    ORDER BY ordinal_position LIMIT 1
  ) AS value_column
FROM information_schema.tables t
WHERE """
    q += LEGACY_SC
    q += """ AND
  EXISTS
  ( SELECT 1
    FROM information_schema.columns c
    WHERE
      c.table_schema = t.table_schema AND
      c.table_name = t.table_name AND
      udt_name IN ('timestamptz','timestamp')
  ) AND
  EXISTS
  ( SELECT 1
    FROM information_schema.columns c
    WHERE
      c.table_schema = t.table_schema AND
      c.table_name = t.table_name AND
      udt_name='float8'
  )
LIMIT 1
;"""
    return q


MB_PRIVS = "\n".join([
    "with table_privileges as (",
    " select",
    "   NULL as role,",
    "   t.schemaname as schema,",
    "   t.objectname as table,",
    "   pg_catalog.has_any_column_privilege(current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'update') as update,",
    "   pg_catalog.has_any_column_privilege(current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'select') as select,",
    "   pg_catalog.has_any_column_privilege(current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'insert') as insert,",
    "   pg_catalog.has_table_privilege(     current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'delete') as delete",
    " from (",
    "   select schemaname, tablename as objectname from pg_catalog.pg_tables",
    "   union",
    "   select schemaname, viewname as objectname from pg_catalog.pg_views",
    "   union",
    "   select schemaname, matviewname as objectname from pg_catalog.pg_matviews",
    " ) t",
    " where t.schemaname !~ '^pg_'",
    "   and t.schemaname <> 'information_schema'",
    "   and pg_catalog.has_schema_privilege(current_user, t.schemaname, 'usage')",
    ")",
    "select t.*",
    "from table_privileges t",
])

MB_GET_TABLES = ('SELECT "n"."nspname" AS "schema", "c"."relname" AS "name", CASE "c"."relkind" WHEN \'r\' THEN \'TABLE\' '
                 'WHEN \'p\' THEN \'PARTITIONED TABLE\' WHEN \'v\' THEN \'VIEW\' WHEN \'f\' THEN \'FOREIGN TABLE\' '
                 'WHEN \'m\' THEN \'MATERIALIZED VIEW\' ELSE NULL END AS "type", "d"."description" AS "description", '
                 '"stat"."n_live_tup" AS "estimated_row_count" FROM "pg_catalog"."pg_class" AS "c" '
                 'INNER JOIN "pg_catalog"."pg_namespace" AS "n" ON "c"."relnamespace" = "n"."oid" '
                 'LEFT JOIN "pg_catalog"."pg_description" AS "d" ON ("c"."oid" = "d"."objoid") AND ("d"."objsubid" = $1) '
                 'AND ("d"."classoid" = \'pg_class\'::regclass) '
                 'LEFT JOIN "pg_stat_user_tables" AS "stat" ON ("n"."nspname" = "stat"."schemaname") '
                 'AND ("c"."relname" = "stat"."relname") '
                 'WHERE ("c"."relnamespace" = "n"."oid") AND ("n"."nspname" !~ $2) AND ("n"."nspname" <> $3) '
                 'AND c.relkind in (\'r\', \'p\', \'v\', \'f\', \'m\') AND ("n"."nspname" IN ($4)) '
                 'ORDER BY "type" ASC, "schema" ASC, "name" ASC')

MB_DESCRIBE_FIELDS = (
    'SELECT "c"."column_name" AS "name", CASE WHEN "c"."udt_schema" IN (\'public\', \'pg_catalog\') '
    'THEN FORMAT(\'%s\', "c"."udt_name") ELSE FORMAT(\'"%s"."%s"\', "c"."udt_schema", "c"."udt_name") END AS "database-type", '
    '"c"."ordinal_position" - 1 AS "database-position", "c"."table_schema" AS "table-schema", "c"."table_name" AS "table-name", '
    '"pk"."column_name" IS NOT NULL AS "pk?", '
    'COL_DESCRIPTION(CAST(CAST(FORMAT(\'%I.%I\', CAST("c"."table_schema" AS TEXT), CAST("c"."table_name" AS TEXT)) AS REGCLASS) AS OID), "c"."ordinal_position") AS "field-comment", '
    '(("column_default" IS NULL) OR (LOWER("column_default") = \'null\')) AND ("is_nullable" = \'NO\') AND NOT ((("column_default" IS NOT NULL) AND ("column_default" LIKE \'%nextval(%\')) OR ("is_identity" <> \'NO\')) AS "database-required", '
    '(("column_default" IS NOT NULL) AND ("column_default" LIKE \'%nextval(%\')) OR ("is_identity" <> \'NO\') AS "database-is-auto-increment" '
    'FROM "information_schema"."columns" AS "c" '
    'LEFT JOIN (SELECT "tc"."table_schema", "tc"."table_name", "kc"."column_name" FROM "information_schema"."table_constraints" AS "tc" '
    'INNER JOIN "information_schema"."key_column_usage" AS "kc" ON ("tc"."constraint_name" = "kc"."constraint_name") '
    'AND ("tc"."table_schema" = "kc"."table_schema") AND ("tc"."table_name" = "kc"."table_name") '
    'WHERE "tc"."constraint_type" = \'PRIMARY KEY\') AS "pk" ON ("c"."table_schema" = "pk"."table_schema") '
    'AND ("c"."table_name" = "pk"."table_name") AND ("c"."column_name" = "pk"."column_name") '
    'WHERE c.table_schema !~ \'^information_schema|catalog_history|pg_\' AND ("c"."table_schema" IN ($1)) '
    'UNION ALL '
    'SELECT "pa"."attname" AS "name", CASE WHEN "ptn"."nspname" IN (\'public\', \'pg_catalog\') '
    'THEN FORMAT(\'%s\', "pt"."typname") ELSE FORMAT(\'"%s"."%s"\', "ptn"."nspname", "pt"."typname") END AS "database-type", '
    '"pa"."attnum" - 1 AS "database-position", "pn"."nspname" AS "table-schema", "pc"."relname" AS "table-name", '
    'FALSE AS "pk?", NULL AS "field-comment", FALSE AS "database-required", FALSE AS "database-is-auto-increment" '
    'FROM "pg_catalog"."pg_class" AS "pc" INNER JOIN "pg_catalog"."pg_namespace" AS "pn" ON "pn"."oid" = "pc"."relnamespace" '
    'INNER JOIN "pg_catalog"."pg_attribute" AS "pa" ON "pa"."attrelid" = "pc"."oid" '
    'INNER JOIN "pg_catalog"."pg_type" AS "pt" ON "pt"."oid" = "pa"."atttypid" '
    'INNER JOIN "pg_catalog"."pg_namespace" AS "ptn" ON "ptn"."oid" = "pt"."typnamespace" '
    'WHERE ("pc"."relkind" = \'m\') AND ("pa"."attnum" >= 1) AND ("pn"."nspname" IN ($2)) '
    'ORDER BY "table-schema" ASC, "table-name" ASC, "database-position" ASC')

MB_DESCRIBE_FKS = (
    'SELECT "fk_ns"."nspname" AS "fk-table-schema", "fk_table"."relname" AS "fk-table-name", "fk_column"."attname" AS "fk-column-name", '
    '"pk_ns"."nspname" AS "pk-table-schema", "pk_table"."relname" AS "pk-table-name", "pk_column"."attname" AS "pk-column-name" '
    'FROM "pg_constraint" AS "c" INNER JOIN "pg_class" AS "fk_table" ON "c"."conrelid" = "fk_table"."oid" '
    'INNER JOIN "pg_namespace" AS "fk_ns" ON "c"."connamespace" = "fk_ns"."oid" '
    'INNER JOIN "pg_attribute" AS "fk_column" ON "c"."conrelid" = "fk_column"."attrelid" '
    'INNER JOIN "pg_class" AS "pk_table" ON "c"."confrelid" = "pk_table"."oid" '
    'INNER JOIN "pg_namespace" AS "pk_ns" ON "pk_table"."relnamespace" = "pk_ns"."oid" '
    'INNER JOIN "pg_attribute" AS "pk_column" ON "c"."confrelid" = "pk_column"."attrelid" '
    'WHERE fk_ns.nspname !~ \'^information_schema|catalog_history|pg_\' AND ("c"."contype" = \'f\'::char) '
    'AND ("fk_column"."attnum" = ANY(c.conkey)) AND ("pk_column"."attnum" = ANY(c.confkey)) AND ("fk_ns"."nspname" IN ($1)) '
    'ORDER BY "fk-table-schema" ASC, "fk-table-name" ASC')

MB_DESCRIBE_INDEXES = (
    'SELECT "tmp"."table-schema", "tmp"."table-name", TRIM(BOTH \'"\' FROM PG_CATALOG.PG_GET_INDEXDEF("tmp"."ci_oid", "tmp"."pos", FALSE)) AS "field-name" '
    'FROM (SELECT "n"."nspname" AS "table-schema", "ct"."relname" AS "table-name", "ci"."oid" AS "ci_oid", '
    '(INFORMATION_SCHEMA._PG_EXPANDARRAY("i"."indkey")).n AS "pos" FROM "pg_catalog"."pg_class" AS "ct" '
    'INNER JOIN "pg_catalog"."pg_namespace" AS "n" ON "ct"."relnamespace" = "n"."oid" '
    'INNER JOIN "pg_catalog"."pg_index" AS "i" ON "ct"."oid" = "i"."indrelid" '
    'INNER JOIN "pg_catalog"."pg_class" AS "ci" ON "ci"."oid" = "i"."indexrelid" '
    'WHERE (PG_CATALOG.PG_GET_EXPR("i"."indpred", "i"."indrelid") IS NULL) '
    'AND n.nspname !~ \'^information_schema|catalog_history|pg_\' AND ("n"."nspname" IN ($1))) AS "tmp" '
    'WHERE "tmp"."pos" = $2')

PGJDBC_GET_SCHEMAS = ("SELECT nspname AS TABLE_SCHEM, NULL AS TABLE_CATALOG FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' "
                      "AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  "
                      "OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  ORDER BY TABLE_SCHEM")

Q = []


def add(tool, name, purpose, cite, sql, params=None, proto="extended", note=""):
    Q.append(dict(tool=tool, name=name, purpose=purpose, cite=cite, sql=sql, params=params or [], proto=proto, note=note))


# ----------------------------------------------------------------------------- Grafana
add("grafana", "ping_libpq", "Health check (Save & test), legacy lib/pq engine: database/sql Ping -> lib/pq Ping sends ';' as a simple query",
    [("grafana/grafana", "pkg/tsdb/grafana-postgresql-datasource/sqleng/handler_checkhealth.go", "0c059270ae12a6b64819f9b818dff64cd98a5276"),
     ("lib/pq", "conn_go18.go", "456e9f2286167b1419741db297f8b14002d435f5")],
    ";", proto="simple")
add("grafana", "ping_pgx", "Health check (Save & test), pgx engine: pgxpool.Ping -> pgconn.Ping sends '-- ping' as a simple query",
    [("grafana/grafana", "pkg/tsdb/grafana-postgresql-datasource/pgx/handler_checkhealth.go", "1b13755cdccfbc5420c9fcb7d6cf2dad7b2888e6"),
     ("jackc/pgx", "pgconn/pgconn.go", "eee854fb069bc2f83344cfaef72d5c9589c4b48c")],
    "-- ping", proto="simple")
add("grafana", "version", "Config page auto-detect of the server version (getVersion)", [GRAFANA_TS, GRAFANA_AUTODETECT],
    "SELECT current_setting('server_version_num')::int/100 as version")
add("grafana", "timescaledb_version", "Config page auto-detect of TimescaleDB (getTimescaleDBVersion), run when version >= 906",
    [GRAFANA_TS, GRAFANA_AUTODETECT],
    "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'")
add("grafana", "show_schemas", "Schema list (showSchemas)", [GRAFANA_TS],
    """SELECT schema_name AS "name"
    FROM information_schema.schemata
    WHERE schema_name NOT IN ('information_schema',
                              'pg_catalog',
                              'pg_toast',
                              '_timescaledb_cache',
                              '_timescaledb_catalog',
                              '_timescaledb_internal',
                              '_timescaledb_config',
                              'timescaledb_information',
                              'timescaledb_experimental')
    ORDER BY schema_name""")
add("grafana", "show_tables", "Query-builder table dropdown / SQL autocompletion (fetchTables -> showTables())",
    [GRAFANA_TS, GRAFANA_DS], grafana_show_tables())
add("grafana", "show_tables_schema", "Table list for an explicit schema (showTables('public'))", [GRAFANA_TS],
    grafana_show_tables_schema("public"))
add("grafana", "get_schema_columns", "Query-builder column dropdown for a table (fetchFields -> getSchema('bi_orders'))",
    [GRAFANA_TS, GRAFANA_DS], grafana_get_schema("bi_orders"))
add("grafana", "get_schema_columns_qualified", "Column list for a schema-qualified table (getSchema('public.bi_orders'))",
    [GRAFANA_TS, GRAFANA_DS], grafana_get_schema("public.bi_orders"))
add("grafana", "schemads_schemas", "Schema handler (Grafana SQL schema API, schema.go querySchemas)", [GRAFANA_SCHEMA_GO],
    """SELECT schema_name FROM information_schema.schemata
\t\t WHERE schema_name NOT LIKE 'pg_%' AND schema_name != 'information_schema'
\t\t ORDER BY schema_name""")
add("grafana", "schemads_tables", "Schema handler table list (schema.go queryTables, $1 = schema)", [GRAFANA_SCHEMA_GO],
    """SELECT table_name FROM information_schema.tables
\t\t WHERE table_schema = $1 AND table_type IN ('BASE TABLE', 'VIEW')
\t\t ORDER BY table_name""", ["public"])
add("grafana", "schemads_columns", "Schema handler column list (schema.go queryColumns, $1 = schema, $2 = table)", [GRAFANA_SCHEMA_GO],
    """SELECT column_name, data_type, udt_name, numeric_precision, numeric_scale
\t\t FROM information_schema.columns
\t\t WHERE table_schema = $1 AND table_name = $2
\t\t ORDER BY ordinal_position""", ["public", "bi_orders"])
add("grafana", "schemads_column_values", "Schema handler distinct values of a column (schema.go ColumnValues, column 'customer')",
    [GRAFANA_SCHEMA_GO],
    "SELECT 'customer' AS col_name, \"customer\"::text AS val FROM (SELECT DISTINCT \"customer\" FROM \"public\".\"bi_orders\" "
    "WHERE \"customer\" IS NOT NULL ORDER BY \"customer\" LIMIT 100) sub_0")
add("grafana", "dashboard_timegroup", "A typical panel query after macro expansion: $__timeGroupAlias(placed_at,'1h') and "
    "$__timeFilter(placed_at) for 2026-01-01..2026-01-03 (not connect/sync; included as a smoke test)", [GRAFANA_MACROS],
    "SELECT floor(extract(epoch from placed_at)/3600)*3600 AS \"time\", sum(amount) AS value FROM bi_orders "
    "WHERE placed_at BETWEEN '2026-01-01T00:00:00Z' AND '2026-01-03T00:00:00Z' GROUP BY 1 ORDER BY 1")
add("grafana-legacy", "find_metric_table", "Grafana <= 8 query editor: default table guess (PostgresMetaQuery.findMetricTable)",
    [GRAFANA_LEGACY], legacy_find_metric_table())
add("grafana-legacy", "table_query", "Grafana <= 8 query editor: table list (buildTableQuery)", [GRAFANA_LEGACY],
    "SELECT quote_ident(table_name) FROM information_schema.tables WHERE " + LEGACY_SC + " ORDER BY table_name")
add("grafana-legacy", "time_column_query", "Grafana <= 8 query editor: time-column list (buildColumnQuery('time') for bi_orders)",
    [GRAFANA_LEGACY],
    "SELECT quote_ident(column_name) FROM information_schema.columns WHERE " + LEGACY_SC +
    " AND table_name = 'bi_orders' AND data_type IN ('timestamp without time zone','timestamp with time zone','bigint','integer','double precision','real') ORDER BY column_name")
add("grafana-legacy", "aggregate_query", "Grafana <= 8 query editor: aggregate function list (buildAggregateQuery)", [GRAFANA_LEGACY],
    "SELECT DISTINCT proname FROM pg_aggregate INNER JOIN pg_proc ON pg_aggregate.aggfnoid = pg_proc.oid "
    "INNER JOIN pg_type ON pg_type.oid=pg_proc.prorettype WHERE pronargs=1 AND typname IN ('float8') AND aggkind='n' ORDER BY 1")

# ----------------------------------------------------------------------------- Metabase
add("metabase", "jdbc_set_extra_float_digits", "pgjdbc connection start-up (sent on every new pooled connection)",
    [("pgjdbc/pgjdbc", "pgjdbc/src/main/java/org/postgresql/core/v3/ConnectionFactoryImpl.java", "(see note)")],
    "SET extra_float_digits = 3", note=PGJDBC_NOTE)
add("metabase", "jdbc_set_application_name", "pgjdbc connection start-up; Metabase sets ApplicationName to 'Metabase v<version> [<uuid>]'",
    [("pgjdbc/pgjdbc", "pgjdbc/src/main/java/org/postgresql/core/v3/ConnectionFactoryImpl.java", "(see note)")],
    "SET application_name = 'Metabase v0.50.0 [d4fe74c4-96c3-4812-b3ae-35e513752b13]'", note=PGJDBC_NOTE)
add("metabase", "jdbc_is_valid", "pgjdbc Connection.isValid() (c3p0 connection test): an empty statement over the extended protocol",
    [("pgjdbc/pgjdbc", "pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java", "(see note)")], "", note=PGJDBC_NOTE)
add("metabase", "can_connect", "Connection test when adding the database (can-connect-with-spec?)", [MB_CONN], "SELECT 1")
add("metabase", "show_timezone", "Database default timezone (driver/db-default-timezone)", [MB_PG], "show timezone;")
add("metabase", "jdbc_set_isolation", "set-best-transaction-level! -> Connection.setTransactionIsolation(READ_UNCOMMITTED), on every connection use",
    [MB_EXEC], "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", note=PGJDBC_NOTE)
add("metabase", "jdbc_show_isolation", "Connection.getTransactionIsolation() (c3p0 reads the default when pooling)", [MB_EXEC],
    "SHOW TRANSACTION ISOLATION LEVEL", note=PGJDBC_NOTE)
add("metabase", "jdbc_get_schemas", "syncable-schemas -> DatabaseMetaData.getSchemas()", [MB_DESCDB, PGJDBC], PGJDBC_GET_SCHEMAS,
    note=PGJDBC_NOTE)
add("metabase", "table_privileges", "describe-database: which tables the user may SELECT (current-user-table-privileges)", [MB_PG, MB_DESCDB],
    MB_PRIVS)
add("metabase", "get_tables", "describe-database: table list with comments and row estimates (get-tables-sql, schemas ['public'])",
    [MB_PG], MB_GET_TABLES, [0, "^pg_", "information_schema", "public"])
add("metabase", "enum_types", "describe-fields pre-processing: enum types", [MB_PG],
    "SELECT nspname, typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid IN (SELECT DISTINCT enumtypid FROM pg_enum e)")
add("metabase", "describe_fields", "sync-fields: all columns with types, PK flag, comments (col_description), required/auto-increment "
    "(describe-fields-sql, schema-names ['public'])", [MB_PG, MB_DESCTBL], MB_DESCRIBE_FIELDS, ["public", "public"])
add("metabase", "describe_fks", "sync-fks: foreign keys (describe-fks-sql, schema-names ['public'])", [MB_PG, MB_DESCTBL], MB_DESCRIBE_FKS,
    ["public"])
add("metabase", "describe_indexes", "sync-indexes (describe-indexes-sql, schema-names ['public']); not sent by default because "
    ":index-info is commented out; hand-rendered HoneySQL, exact spelling uncertain", [MB_PG, MB_DESCTBL], MB_DESCRIBE_INDEXES,
    ["public", 1])
add("metabase", "select_probe", "have-select-privilege? probe (used for foreign tables, and by drivers without :table-privileges)",
    [MB_DESCDB], 'SELECT TRUE AS "_" FROM "public"."bi_orders" WHERE 1 <> 1 LIMIT 0')
add("metabase", "fallback_metadata", "fallback-metadata-query: column types from an empty SELECT *", [MB_DESCTBL],
    'SELECT * FROM "public"."bi_orders" WHERE 1 <> 1 LIMIT 0')
add("metabase", "jdbc_get_tables", "JDBC-generic describe-database (sql-jdbc fast-active-tables -> DatabaseMetaData.getTables); "
    "what Metabase < 0.50 and other sql-jdbc paths send", [MB_DESCDB, PGJDBC], "(captured; see file)", note=PGJDBC_NOTE)
add("metabase", "jdbc_get_columns", "JDBC-generic describe-table (DatabaseMetaData.getColumns(null,'public','bi_orders',null))",
    [MB_DESCTBL, PGJDBC], "(captured; see file)", note=PGJDBC_NOTE)
add("metabase", "jdbc_get_primary_keys", "JDBC-generic describe-table PKs (DatabaseMetaData.getPrimaryKeys)", [MB_DESCTBL, PGJDBC],
    "(captured; see file)", note=PGJDBC_NOTE)
add("metabase", "jdbc_max_index_keys", "pgjdbc, first getImportedKeys call on a connection", [PGJDBC],
    "SELECT setting FROM pg_catalog.pg_settings WHERE name='max_index_keys'", note=PGJDBC_NOTE)
add("metabase", "jdbc_get_imported_keys", "JDBC-generic describe-table-fks (DatabaseMetaData.getImportedKeys)", [MB_DESCTBL, PGJDBC],
    "(captured; see file)", note=PGJDBC_NOTE)
add("metabase", "jdbc_get_index_info", "JDBC-generic describe-table-indexes (DatabaseMetaData.getIndexInfo)", [MB_DESCTBL, PGJDBC],
    "(captured; see file)", note=PGJDBC_NOTE)
add("metabase", "jdbc_rsmd_field_metadata", "pgjdbc ResultSetMetaData (isAutoIncrement/isNullable/getTableName) on a query result; "
    "oid literal is the table's pg_class oid", [PGJDBC], "(captured; see file)", note=PGJDBC_NOTE)

# pgjdbc-captured texts
import json as _json, os as _os
_cap = _json.load(open(_os.path.join(_os.path.dirname(__file__), "bi_queries_pgjdbc.json")))
for _q in Q:
    if _q["name"] in _cap:
        _q["sql"] = _cap[_q["name"]]

# Metabase extras: analyze step and the variants seen in a capture of a newer Metabase
CAPTURE_NOTE = ("Text per a capture of Metabase v0.62.1.5 + its bundled pgjdbc syncing Postgres 16, found in the public code index "
                "(file id 55699000340; the tool did not name its repository). Not from Metabase's source at the cited commit; "
                "included because it is what a current Metabase sends.")
add("metabase", "jdbc_begin_read_only", "pgjdbc with setReadOnly(true) and autocommit off (write?/transaction paths): begins every transaction this way",
    [MB_EXEC, ("pgjdbc/pgjdbc", "pgjdbc/src/main/java/org/postgresql/core/v3/QueryExecutorImpl.java", "(see note)")], "BEGIN READ ONLY",
    note=PGJDBC_NOTE)
add("metabase", "jdbc_commit", "closing the read-only transaction", [MB_EXEC], "COMMIT", note=PGJDBC_NOTE)
add("metabase", "fingerprint_sample", "sync analyze: fingerprint sample rows (table-rows-sample, text columns wrapped in SUBSTRING)",
    [("metabase/metabase", "src/metabase/driver/common/table_rows_sample.clj", "d2e38202356c5eaf912fcfce9dff5a3883e0db33")],
    'SELECT "public"."bi_orders"."id" AS "id", SUBSTRING("public"."bi_orders"."customer", 1, 1234) AS "substring4476", '
    '"public"."bi_orders"."amount" AS "amount", "public"."bi_orders"."placed_at" AS "placed_at" FROM "public"."bi_orders" LIMIT 10000',
    note="Shape per the v0.62 capture (" + "file id 55699000340" + "); MBQL-compiled, so alias names vary.")
add("metabase-v062", "get_schemas_new_pgjdbc", "newer pgjdbc getSchemas (TABLE_CATALOG = current_database())", [PGJDBC],
    "SELECT nspname AS \"TABLE_SCHEM\", current_database() AS \"TABLE_CATALOG\" FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' "
    "AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  "
    "OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  ORDER BY \"TABLE_SCHEM\"",
    note=CAPTURE_NOTE)
add("metabase-v062", "select_current_catalog", "newer pgjdbc Connection.getCatalog()", [PGJDBC], "select current_catalog", note=CAPTURE_NOTE)
add("metabase-v062", "set_isolation_read_committed", "c3p0 resets the isolation level on check-in", [MB_EXEC],
    "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED", note=CAPTURE_NOTE)
add("metabase-v062", "get_tables_nullif", "describe-database in v0.62 (estimated_row_count via NULLIF)", [MB_PG],
    MB_GET_TABLES.replace('"stat"."n_live_tup" AS', 'NULLIF("stat"."n_live_tup", $1) AS')
    .replace('("d"."objsubid" = $1)', '("d"."objsubid" = $2)').replace('!~ $2', '!~ $3').replace('<> $3', '<> $4').replace('IN ($4)', 'IN ($5)'),
    [0, 0, "^pg_", "information_schema", "public"], note=CAPTURE_NOTE)
add("metabase-v062", "describe_fields", "describe-fields in v0.62 (adds database-default, database-is-generated, database-is-nullable)",
    [MB_PG],
    MB_DESCRIBE_FIELDS
    .replace('AS "database-required", ', 'AS "database-required", "column_default" AS "database-default", ', 1)
    .replace('OR ("is_identity" <> \'NO\') AS "database-is-auto-increment" FROM',
             'OR ("is_identity" <> \'NO\') AS "database-is-auto-increment", "is_generated" = $1 AS "database-is-generated", '
             '"is_nullable" = \'YES\' AS "database-is-nullable" FROM')
    .replace('IN ($1)) UNION ALL', 'IN ($2)) UNION ALL')
    .replace('FALSE AS "database-required", FALSE AS "database-is-auto-increment" FROM',
             'FALSE AS "database-required", NULL AS "database-default", FALSE AS "database-is-auto-increment", '
             'FALSE AS "database-is-generated", FALSE AS "database-is-nullable" FROM')
    .replace('("pn"."nspname" IN ($2))', '("pn"."nspname" IN ($3))'),
    ["ALWAYS", "public", "public"], note=CAPTURE_NOTE)
add("metabase-v062", "get_primary_keys_new_pgjdbc", "newer pgjdbc getPrimaryKeys (KEY_COUNT via indnkeyatts), $1 schema, $2 table",
    [PGJDBC],
    "SELECT        result.TABLE_CAT AS \"TABLE_CAT\",        result.TABLE_SCHEM AS \"TABLE_SCHEM\",        result.TABLE_NAME AS \"TABLE_NAME\",        "
    "result.COLUMN_NAME AS \"COLUMN_NAME\",        result.KEY_SEQ AS \"KEY_SEQ\",        result.PK_NAME AS \"PK_NAME\"FROM      "
    "(SELECT current_database() AS TABLE_CAT, n.nspname AS TABLE_SCHEM,   ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME,   "
    "(information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ, ci.relname AS PK_NAME,   information_schema._pg_expandarray(i.indkey) AS KEYS, "
    "a.attnum AS A_ATTNUM, i.indnkeyatts as KEY_COUNT FROM pg_catalog.pg_class ct   JOIN pg_catalog.pg_attribute a ON (ct.oid = a.attrelid)   "
    "JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)   JOIN pg_catalog.pg_index i ON ( a.attrelid = i.indrelid)   "
    "JOIN pg_catalog.pg_class ci ON (ci.oid = i.indexrelid) WHERE true  AND n.nspname = $1 AND ct.relname = $2 AND i.indisprimary  ) result "
    "where  result.A_ATTNUM = (result.KEYS).x AND result.KEY_SEQ <= KEY_COUNT  ORDER BY result.table_name, result.pk_name, result.key_seq",
    ["public", "bi_orders"], note=CAPTURE_NOTE)
add("metabase-v062", "gui_count", "a GUI question (Count of rows), MBQL-compiled", [MB_PG],
    "-- Metabase:: userID: 1 queryType: MBQL queryHash: a54de39466cbf3e82ff09c5a9a2bccf1f922bf9fd59b2717c1ad5e09a1c0bfbc\n"
    "SELECT COUNT(*) AS \"count\" FROM \"public\".\"bi_orders\"", note=CAPTURE_NOTE)
