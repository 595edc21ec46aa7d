/* SPDX-License-Identifier: MIT */
/*
 * TCP stream: the data path of the TCP transport. A stream job moves the bytes of a list of
 * segments over one connected, non-blocking stream socket, raw, cut into chunks that each follow
 * a small fixed header; the receiver reads every payload straight into its destination segments.
 *
 * Wire format of one chunk (all integers little-endian, TCP_STREAM_HEADER_SIZE bytes, then
 * `length` payload bytes):
 *
 *   u32 magic        TCP_STREAM_MAGIC, the bytes "KVDS"
 *   u32 flags        TCP_STREAM_FLAG_CRC, TCP_STREAM_FLAG_ABORT, both or 0; any other bit is
 *                    rejected
 *   u64 transfer_id
 *   u64 offset       of the chunk's first byte in the job's logical byte stream (job-global)
 *   u32 length       payload bytes, > 0; 0 exactly with TCP_STREAM_FLAG_ABORT
 *   u32 crc          CRC32C of the payload with TCP_STREAM_FLAG_CRC, else 0; 0 with ABORT
 *
 * The job's logical byte stream is its segments laid end to end; a job may be split into
 * contiguous [start, end) ranges, one per connection (tcp_stream_split()), each carried by its
 * own sender/receiver pair with the same job-global offsets. Chunks of one range arrive in order.
 *
 * An ABORT chunk (no payload, offset = where the range stands) ends a range early: the sender
 * had to stop (its job was cancelled), and the receiver's range ends there, failed, with the
 * connection still in step for whatever follows. TCP_STREAM_FLAG_CRC on an ABORT chunk still
 * says whether the stream carries CRCs, so it must agree with the receiver as on any chunk.
 *
 * A receiver can be switched to discard mode: payload is then read into a scratch buffer and
 * dropped instead of landing in the destination (headers and CRC flags are still checked, CRC
 * values no longer are), so a connection keeps in step through a range nobody wants any more.
 *
 * Safety: the receiver validates a whole header before it reads any payload, and reads a payload
 * only into the destination bytes its (validated) offset and length name, so a corrupt or
 * hostile stream never writes outside the destination segments, and a rejected header writes
 * nothing. It never reads past its range's last payload byte, so whatever follows on the
 * connection stays there for the caller.
 *
 * Trust: on any error the transfer has failed. Payload bytes land in the destination before
 * their CRC can be checked, so after -EILSEQ (or any other error) the destination segments hold
 * bytes of unknown origin and must not be used; only a step that returned 1 vouches for them.
 *
 * The sender computes a chunk's CRC before it sends the chunk, so the source bytes must not
 * change while the job is in flight.
 *
 * Neither side allocates, logs or uses an event loop: the caller polls the socket and calls the
 * step function again when it is writable (sender) or readable (receiver). The segment arrays
 * and the memory they name are borrowed and must stay valid until the job is done or dropped.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TCP_STREAM_MAGIC UINT32_C(0x5344564b) /* "KVDS" as a little-endian u32 */
#define TCP_STREAM_FLAG_CRC UINT32_C(0x1)
#define TCP_STREAM_FLAG_ABORT UINT32_C(0x2)
#define TCP_STREAM_FLAGS_KNOWN (TCP_STREAM_FLAG_CRC | TCP_STREAM_FLAG_ABORT)
#define TCP_STREAM_HEADER_SIZE 32
#define TCP_STREAM_CHUNK_DEFAULT (UINT32_C(1) << 20)
#define TCP_STREAM_CHUNK_MAX (UINT32_C(1) << 30)

/* What the step functions return besides a negative errno. */
enum {
        TCP_STREAM_BLOCKED = 0, /* the socket would block: call again once it is ready */
        TCP_STREAM_DONE = 1,    /* the range is finished */
        TCP_STREAM_MORE = 2,    /* the byte budget is spent: call again, no need to wait */
};

/* A chunk header as it stands on the wire, after tcp_stream_header_parse() checked it. */
typedef struct TcpStreamHeader {
        uint32_t flags;
        uint64_t transfer_id;
        uint64_t offset;
        uint32_t length;
        uint32_t crc;
} TcpStreamHeader;

/* A source segment: @len bytes at @src (which may be NULL only when @len is 0). */
typedef struct TcpSrcSegment {
        const void *src;
        size_t len;
} TcpSrcSegment;

/* A destination segment: @len bytes at @dst (which may be NULL only when @len is 0). */
typedef struct TcpDstSegment {
        void *dst;
        size_t len;
} TcpDstSegment;

/* A [start, end) byte range of a job's logical byte stream. */
typedef struct TcpStreamRange {
        uint64_t start;
        uint64_t end;
} TcpStreamRange;

/* Where a side stands in its segment list: segment index and offset inside it. */
typedef struct TcpStreamCursor {
        size_t seg;
        size_t off;
} TcpStreamCursor;

/* Embeddable; fields are the module's business (read pos/end for progress). */
typedef struct TcpSender {
        uint64_t transfer_id;
        const TcpSrcSegment *segs;
        size_t n_segs;
        uint64_t end;        /* job-global end of this sender's range */
        uint64_t pos;        /* job-global offset of the next payload byte to send */
        TcpStreamCursor cur; /* segment position of @pos */
        uint32_t chunk_size;
        bool crc;
        bool in_chunk; /* a header was built and not all of its chunk sent */
        bool abort;    /* end the range with an ABORT chunk at the next boundary */
        bool aborted;  /* the ABORT chunk's header was built */
        uint32_t hdr_sent;
        uint64_t chunk_end; /* job-global end of the current chunk */
        int error;          /* sticky: once a step failed, it keeps failing */
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
} TcpSender;

/* Embeddable; fields are the module's business (read pos/end for progress). */
typedef struct TcpReceiver {
        uint64_t transfer_id;
        const TcpDstSegment *segs;
        size_t n_segs;
        uint64_t end;        /* job-global end of this receiver's range */
        uint64_t pos;        /* job-global offset of the next payload byte expected */
        TcpStreamCursor cur; /* segment position of @pos */
        bool crc;
        bool in_chunk; /* a header was accepted and its payload is arriving */
        uint32_t hdr_got;
        uint64_t chunk_end;
        uint32_t chunk_crc; /* the header's CRC */
        uint32_t crc_run;   /* CRC32C of the chunk's payload landed so far */
        uint8_t *scratch;   /* discard mode: payload lands here and is dropped */
        size_t scratch_len;
        int error; /* sticky */
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
} TcpReceiver;

/*
 * Cuts [0, @total_bytes) into at most @n_streams contiguous ranges, in order, of near-equal
 * size, using fewer streams when that would make a range shorter than @min_bytes (0 counts as
 * 1); always at least one range for a non-empty job. Writes the ranges to @ret_ranges (room for
 * @n_streams entries) and returns how many it wrote: 0 for an empty job. -EINVAL when
 * @n_streams is 0.
 */
int tcp_stream_split(uint64_t total_bytes, unsigned n_streams, uint64_t min_bytes,
                     TcpStreamRange *ret_ranges);

/*
 * Parses the TCP_STREAM_HEADER_SIZE bytes at @buf and checks what a header can be judged on
 * alone, for a stream that carries CRCs when @crc. Returns 0 and fills @ret, or:
 *   -EBADMSG     bad magic, an unknown flag, a CRC flag (or CRC field) that disagrees with @crc,
 *                or an ABORT chunk with a length or a CRC
 *   -EPROTO      an empty chunk that is no ABORT, or one whose end overflows 64 bits
 * Whether the chunk fits a receiver (id, offset, length) is tcp_receiver_start()'s to say.
 */
int tcp_stream_header_parse(const uint8_t *buf, bool crc, TcpStreamHeader *ret);

/* The job's size: the sum of the segments' lengths; -EOVERFLOW when it does not fit. */
int tcp_stream_src_total(const TcpSrcSegment *segs, size_t n, uint64_t *ret_total);
int tcp_stream_dst_total(const TcpDstSegment *segs, size_t n, uint64_t *ret_total);

/*
 * Prepares @s to send the whole job: every byte of @segs (borrowed) in chunks of at most
 * @chunk_size bytes (0: TCP_STREAM_CHUNK_DEFAULT), with a CRC32C per chunk when @crc.
 * -EINVAL for a NULL segment with a length, or @chunk_size above TCP_STREAM_CHUNK_MAX;
 * -EOVERFLOW when the segments add up to more than 2^64-1 bytes.
 */
int tcp_sender_init(TcpSender *s, uint64_t transfer_id, const TcpSrcSegment *segs, size_t n,
                    uint32_t chunk_size, bool crc);

/*
 * As tcp_sender_init(), for the job-global byte range [@start, @end) only (one of several
 * parallel streams); chunk offsets stay job-global. -EINVAL unless start <= end <= job size.
 */
int tcp_sender_init_range(TcpSender *s, uint64_t transfer_id, const TcpSrcSegment *segs, size_t n,
                          uint64_t start, uint64_t end, uint32_t chunk_size, bool crc);

/*
 * Prepares @s to send nothing of the job's range [@start, @end) but one ABORT chunk at @start,
 * for a range that will not be sent after all. It names no memory. -EINVAL unless start < end.
 */
int tcp_sender_init_aborted(TcpSender *s, uint64_t transfer_id, uint64_t start, uint64_t end,
                            bool crc);

/*
 * Asks @s to end its range early: the chunk in progress is finished (its header promised the
 * payload), then, unless that was the range's last byte, an ABORT chunk at the position reached
 * is sent. tcp_sender_step() returns 1 once that is on the wire. Idempotent.
 */
void tcp_sender_abort(TcpSender *s);

/*
 * Sends on @fd (a connected, non-blocking stream socket) until the socket would block or the
 * range is sent, resuming a partial write exactly where it stopped. Returns 1 when every byte is
 * sent (or the ABORT chunk is, after tcp_sender_abort()), 0 when the socket would block (call
 * again once it is writable), -errno from sendmsg() otherwise (-EPIPE, -ECONNRESET, ...; no
 * SIGPIPE is raised). An error is sticky.
 */
int tcp_sender_step(TcpSender *s, int fd);

/*
 * As tcp_sender_step(), but returns TCP_STREAM_MORE once the system calls of this call moved
 * @max_bytes bytes or more (headers included), so a thread serving several things gives each
 * a bounded turn. A call moves at least one system call's worth before it stops.
 */
int tcp_sender_step_max(TcpSender *s, int fd, uint64_t max_bytes);

/*
 * Prepares @r to receive the whole job into @segs (borrowed), expecting chunks of
 * @transfer_id with a CRC32C each when @crc (without one when not). Errors as tcp_sender_init().
 */
int tcp_receiver_init(TcpReceiver *r, uint64_t transfer_id, const TcpDstSegment *segs, size_t n,
                      bool crc);

/*
 * As tcp_receiver_init(), accepting only the job-global byte range [@start, @end). -EINVAL
 * unless start <= end <= job size.
 */
int tcp_receiver_init_range(TcpReceiver *r, uint64_t transfer_id, const TcpDstSegment *segs,
                            size_t n, uint64_t start, uint64_t end, bool crc);

/*
 * Prepares @r to receive the job-global range [@start, @end) in discard mode (see
 * tcp_receiver_discard()) from the start: it names no destination. -EINVAL unless start <= end
 * and @scratch is non-NULL with a non-zero @scratch_len.
 */
int tcp_receiver_init_discard(TcpReceiver *r, uint64_t transfer_id, uint64_t start, uint64_t end,
                              bool crc, void *scratch, size_t scratch_len);

/*
 * Switches @r to discard mode: from now on, including the rest of a chunk in progress, payload is
 * read into @scratch (@scratch_len bytes, borrowed, overwritten at will) and dropped; nothing
 * more is written to the destination, which @r forgets. Headers are checked as before, CRC values
 * are not. Clears a sticky -EILSEQ (after a CRC mismatch the stream is still in step, so the rest
 * of the range can be read past); any other error stays. -EINVAL without a scratch buffer.
 */
int tcp_receiver_discard(TcpReceiver *r, void *scratch, size_t scratch_len);

/*
 * Starts @r's next chunk from a header the caller read off the socket itself and parsed with
 * tcp_stream_header_parse() (with the same @crc), so that it could pick the receiver by the
 * header's id and offset. Returns 0 when the chunk is accepted (its payload follows: go on with
 * tcp_receiver_step()), -ECANCELED for an ABORT chunk at the expected offset (the range ends
 * here, failed; the stream is in step), -EPROTO as tcp_receiver_step() for a chunk that does not
 * fit, or -EBUSY when @r is inside a chunk or header (not sticky). Other errors are sticky.
 */
int tcp_receiver_start(TcpReceiver *r, const TcpStreamHeader *h);

/*
 * Reads from @fd (a connected, non-blocking stream socket) until it would block or the range has
 * arrived. Returns 1 when every byte of the range has landed (and passed its CRC), 0 when the
 * socket has nothing more for now (call again once it is readable), or:
 *   -EBADMSG     bad magic, an unknown flag, a CRC flag (or CRC field) that disagrees with @crc,
 *                or an ABORT chunk that carries a length or a CRC
 *   -EPROTO      wrong transfer id, or a chunk that is empty without being an ABORT, is not at
 *                the next expected offset (which also catches offsets outside the range) or runs
 *                past the range's end
 *   -ECANCELED   an ABORT chunk at the next expected offset: the sender ended the range early;
 *                nothing after the ABORT header was read
 *   -EILSEQ      a payload's CRC32C does not match its header (the whole chunk was read, so the
 *                stream is in step: tcp_receiver_discard() can read past the rest of the range)
 *   -ECONNRESET  end of stream before the range was complete
 *   -errno       from recv()/recvmsg()
 * An error is sticky, and after one the destination's contents are not to be trusted.
 */
int tcp_receiver_step(TcpReceiver *r, int fd);

/* As tcp_receiver_step(), with a byte budget as tcp_sender_step_max(). */
int tcp_receiver_step_max(TcpReceiver *r, int fd, uint64_t max_bytes);
