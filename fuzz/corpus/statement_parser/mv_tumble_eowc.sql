CREATE MATERIALIZED VIEW unique_users AS
SELECT window_start, window_end, COUNT(DISTINCT user_id) AS users
FROM TUMBLE(page_views, viewed_at, INTERVAL '5' MINUTE)
GROUP BY window_start, window_end
EMIT ON WINDOW CLOSE