// pgjdbc's DatabaseMetaData against weir: what DBeaver, Metabase and Tableau
// call to list tables and describe them. Run with Java's single-file launcher:
//   java -cp /usr/share/java/postgresql.jar JdbcCheck.java <jdbc url>
// Exits non-zero with the failing check on stderr.
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;

public class JdbcCheck {
    public static void main(String[] args) throws Exception {
        try (Connection connection = DriverManager.getConnection(args[0])) {
            try (Statement statement = connection.createStatement()) {
                statement.execute("CREATE TABLE jdbc_riders (id BIGINT, region TEXT NOT NULL, "
                        + "email VARCHAR(80), score DOUBLE PRECISION DEFAULT 0, PRIMARY KEY (id, region))");
                statement.execute("CREATE VIEW jdbc_emails AS SELECT email FROM jdbc_riders");
                statement.execute("CREATE MATERIALIZED VIEW jdbc_per_region AS "
                        + "SELECT region, count(*) AS n FROM jdbc_riders GROUP BY region");
            }
            try {
                check(connection.getMetaData());
            } finally {
                try (Statement statement = connection.createStatement()) {
                    statement.execute("DROP MATERIALIZED VIEW jdbc_per_region");
                    statement.execute("DROP VIEW jdbc_emails");
                    statement.execute("DROP TABLE jdbc_riders");
                }
            }
        }
        System.out.println("jdbc ok");
    }

    static void check(DatabaseMetaData metadata) throws SQLException {
        expect("product name", metadata.getDatabaseProductName(), "PostgreSQL");
        expect("tables", names(metadata.getTables(null, "public", "jdbc_%", new String[] {"TABLE"}), "TABLE_NAME"),
                List.of("jdbc_riders"));
        expect("views", names(metadata.getTables(null, "public", "jdbc_%", new String[] {"VIEW"}), "TABLE_NAME"),
                List.of("jdbc_emails"));
        expect("materialized views",
                names(metadata.getTables(null, "public", "jdbc_%", new String[] {"MATERIALIZED VIEW"}), "TABLE_NAME"),
                List.of("jdbc_per_region"));
        expect("schemas contain public", names(metadata.getSchemas(), "TABLE_SCHEM").contains("public"), true);
        checkColumns(metadata);
        expect("primary key", names(metadata.getPrimaryKeys(null, "public", "jdbc_riders"), "COLUMN_NAME"),
                List.of("id", "region"));
        expect("primary key name", names(metadata.getPrimaryKeys(null, "public", "jdbc_riders"), "PK_NAME"),
                List.of("jdbc_riders_pkey", "jdbc_riders_pkey"));
        List<String> index = new ArrayList<>();
        try (ResultSet rows = metadata.getIndexInfo(null, "public", "jdbc_riders", false, true)) {
            while (rows.next()) {
                index.add(rows.getString("INDEX_NAME") + ":" + rows.getString("COLUMN_NAME") + ":"
                        + rows.getBoolean("NON_UNIQUE"));
            }
        }
        expect("index info", index, List.of("jdbc_riders_pkey:id:false", "jdbc_riders_pkey:region:false"));
        expect("imported keys", names(metadata.getImportedKeys(null, "public", "jdbc_riders"), "FKCOLUMN_NAME"),
                List.of());
        expect("exported keys", names(metadata.getExportedKeys(null, "public", "jdbc_riders"), "PKCOLUMN_NAME"),
                List.of());
    }

    static void checkColumns(DatabaseMetaData metadata) throws SQLException {
        List<String> columns = new ArrayList<>();
        try (ResultSet rows = metadata.getColumns(null, "public", "jdbc_riders", "%")) {
            while (rows.next()) {
                columns.add(rows.getString("COLUMN_NAME") + ":" + rows.getString("TYPE_NAME") + ":"
                        + rows.getInt("DATA_TYPE") + ":" + rows.getString("IS_NULLABLE") + ":"
                        + rows.getInt("ORDINAL_POSITION") + ":" + rows.getString("COLUMN_DEF"));
            }
        }
        expect("columns", columns, List.of(
                "id:int8:" + Types.BIGINT + ":NO:1:null",
                "region:text:" + Types.VARCHAR + ":NO:2:null",
                "email:varchar:" + Types.VARCHAR + ":YES:3:null",
                "score:float8:" + Types.DOUBLE + ":YES:4:0"));
        List<String> viewColumns = names(metadata.getColumns(null, "public", "jdbc_per_region", "%"), "COLUMN_NAME");
        expect("materialized view columns", viewColumns, List.of("region", "n"));
    }

    static List<String> names(ResultSet rows, String column) throws SQLException {
        List<String> names = new ArrayList<>();
        try (rows) {
            while (rows.next()) {
                names.add(rows.getString(column));
            }
        }
        return names;
    }

    static void expect(String what, Object actual, Object expected) {
        if (!actual.equals(expected)) {
            System.err.println(what + ": expected " + expected + ", got " + actual);
            System.exit(1);
        }
    }
}
