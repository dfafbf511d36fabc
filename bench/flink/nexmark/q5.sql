-- q5, hot items: per HOP window (10 s every 2 s) the auction(s) with the most bids, all of
-- them on a tie. Nexmark's own form joins the counts with their maximum by a regular join,
-- which updates; here both sides stay window operators, so the result is final and
-- insert-only: the counts (a window aggregate), their maximum per window (a window aggregate
-- over the first, on its window_start/window_end), joined by a window join on the window.
-- Window bounds as epoch ms (the session's zone is UTC; HOP bounds are whole seconds).
CREATE TABLE sink (auction BIGINT, `count` BIGINT, window_start BIGINT, window_end BIGINT)
WITH (${append_sink});

CREATE VIEW counts AS
SELECT auction, COUNT(*) AS num, window_start, window_end
FROM TABLE(HOP(TABLE bid, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end;

CREATE VIEW maxima AS
SELECT MAX(num) AS maxn, window_start, window_end
FROM counts
GROUP BY window_start, window_end;

INSERT INTO sink
SELECT C.auction, C.num,
  CAST(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', C.window_start) AS BIGINT) * 1000,
  CAST(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', C.window_end) AS BIGINT) * 1000
FROM counts AS C JOIN maxima AS M
ON C.window_start = M.window_start AND C.window_end = M.window_end AND C.num = M.maxn;
