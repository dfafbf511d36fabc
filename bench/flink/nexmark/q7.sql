-- q7, highest bid: per tumbling 10 s window the bid(s) with the highest price, all of them on
-- a tie. Nexmark's form joins the bids with the window maximum by a regular join with
-- date_time BETWEEN end - 10 s AND end (a bid at exactly the end would meet two windows);
-- here a window join of the bids' TUMBLE with the maximum per window: each bid in its own
-- window [start, end), final and insert-only.
CREATE TABLE sink (
  auction BIGINT, bidder BIGINT, price BIGINT, date_time BIGINT, window_end BIGINT
) WITH (${append_sink});

CREATE VIEW maxima AS
SELECT MAX(price) AS maxprice, window_start, window_end
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end;

CREATE VIEW windowed AS
SELECT auction, bidder, price, date_time, window_start, window_end
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND));

INSERT INTO sink
SELECT B.auction, B.bidder, B.price, B.date_time,
  CAST(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', B.window_end) AS BIGINT) * 1000
FROM windowed AS B JOIN maxima AS M
ON B.window_start = M.window_start AND B.window_end = M.window_end AND B.price = M.maxprice;
