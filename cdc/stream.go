package cdc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"golang.org/x/sync/errgroup"
)

// heartbeatPrefix marks the logical messages the source emits to move an idle slot.
const heartbeatPrefix = "tarn.heartbeat"

// streamState is shared by the stream's goroutines.
type streamState struct {
	msgs    chan pglogrepl.Message
	reply   chan struct{} // the server asked for a status update
	durable atomic.Uint64 // LSN durable in Kafka: the only position ever confirmed to the server
}

func (st *streamState) poke() {
	select {
	case st.reply <- struct{}{}:
	default:
	}
}

// stream replicates from r.pos until ctx is cancelled. Receiving, confirming and applying run
// in their own goroutines, so a slow Kafka flush never delays a status update past the
// server's wal_sender_timeout.
func (r *runner) stream(ctx context.Context) error {
	if err := r.startReplication(ctx); err != nil {
		return err
	}
	st := &streamState{msgs: make(chan pglogrepl.Message, 4096), reply: make(chan struct{}, 1)}
	st.durable.Store(uint64(r.pos.Resume))
	r.m.confirmedLSN.Set(float64(r.pos.Resume))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.receive(gctx, st) })
	g.Go(func() error { return r.sendStatus(gctx, st) })
	g.Go(func() error { return r.heartbeat(gctx) })
	g.Go(func() error { return newApplier(r, st).run(gctx) })
	return g.Wait()
}

// startReplication starts at the source's own durable position, never at the server's
// idea of it (IDENTIFY_SYSTEM's position, or a confirmed position that on Postgres 15 can go
// back after a restart), and then checks that the server did not skip past it.
func (r *runner) startReplication(ctx context.Context) error {
	if err := r.waitSlotInactive(ctx); err != nil {
		return err
	}
	args := []string{"proto_version '1'", "publication_names " + quoteLiteral(r.cfg.Publication), "messages 'true'"}
	err := pglogrepl.StartReplication(ctx, r.repl, r.cfg.Slot, pglogrepl.LSN(r.pos.Resume),
		pglogrepl.StartReplicationOptions{PluginArgs: args})
	if err != nil {
		return r.classifyStream(err)
	}
	slot, err := readSlot(ctx, r.catalog, r.cfg.Slot)
	if err != nil {
		return err
	}
	if slot.confirmed > r.pos.Resume {
		return fmt.Errorf("%w: after START_REPLICATION slot %s confirmed %s, durable position %s", ErrSlotAhead, r.cfg.Slot, slot.confirmed, r.pos.Resume)
	}
	r.streaming.Store(true)
	r.m.up.Set(1)
	r.log.Info("cdc: streaming", "from", r.pos.Resume, "slot_confirmed", slot.confirmed, "timeline", r.sys.Timeline)
	return nil
}

// receive reads the replication stream. pgconn reuses its read buffer, so each message is
// copied before it is parsed and handed on.
func (r *runner) receive(ctx context.Context, st *streamState) error {
	for {
		msg, err := r.repl.ReceiveMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return r.classifyStream(err)
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := r.receiveData(ctx, st, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return r.classifyStream(pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			// A walsender ends its stream this way when the server shuts down: a restart
			// passes, so this is not ErrProtocol.
			return errors.New("cdc: the server ended the replication stream (shutting down?)")
		}
	}
}

func (r *runner) receiveData(ctx context.Context, st *streamState, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty CopyData", ErrProtocol)
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if k.ReplyRequested {
			st.poke()
		}
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		m, err := pglogrepl.Parse(bytes.Clone(x.WALData))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		select {
		case st.msgs <- m:
		case <-ctx.Done():
		}
	}
	return nil
}

// sendStatus confirms the durable position: on a timer, when the server asks, and after
// each batch. Write, flush and apply are all set to it (pglogrepl would fill a zero flush
// position from the write position, which confirms what was merely received).
func (r *runner) sendStatus(ctx context.Context, st *streamState) error {
	t := time.NewTicker(r.cfg.StatusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-st.reply:
		}
		d := pglogrepl.LSN(st.durable.Load())
		err := pglogrepl.SendStandbyStatusUpdate(ctx, r.repl, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: d, WALFlushPosition: d, WALApplyPosition: d})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("cdc: send standby status: %w", err)
		}
		r.m.confirmedLSN.Set(float64(d))
	}
}

// heartbeat emits a non-transactional logical message now and then: since Postgres 15 empty
// transactions are not sent, so without it a slot whose tables are quiet never advances and
// the server keeps WAL without bound. It also samples the slot's lag.
func (r *runner) heartbeat(ctx context.Context) error {
	conn, err := connect(ctx, r.cfg.PostgresURL)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer conn.Close(context.Background())
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if _, err := conn.Exec(ctx, "SELECT pg_logical_emit_message(false, $1, $2)", heartbeatPrefix, r.cfg.Slot); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("cdc: emit heartbeat: %w", err)
		}
		r.m.heartbeats.Inc()
		slot, err := readSlot(ctx, conn, r.cfg.Slot)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if slot.walStatus == "lost" {
			return fmt.Errorf("%w: %s", ErrSlotInvalidated, r.cfg.Slot)
		}
		r.m.slotLag.Set(float64(slot.lagBytes))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
