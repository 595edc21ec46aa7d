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
 *   u32 flags        TCP_STREAM_FLAG_CRC or 0; any other bit is rejected
 *   u64 transfer_id
 *   u64 offset       of the chunk's first byte in the job's logical byte stream (job-global)
 *   u32 length       payload bytes, > 0
 *   u32 crc          CRC32C of the payload with TCP_STREAM_FLAG_CRC, else 0
 *
 * The job's logical byte stream is its segments laid end to end; a job may be split into
 * contiguous [start, end) ranges, one per connection (tcp_stream_split()), each carried by its
 * own sender/receiver pair with the same job-global offsets. Chunks of one range arrive in order.
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

#define TCP_STREAM_MAGIC UINT32_C(0x5344564b)        /* "KVDS" as a little-endian u32 */
#define TCP_STREAM_FLAG_CRC UINT32_C(0x1)
#define TCP_STREAM_FLAGS_KNOWN TCP_STREAM_FLAG_CRC
#define TCP_STREAM_HEADER_SIZE 32
#define TCP_STREAM_CHUNK_DEFAULT (UINT32_C(1) << 20)
#define TCP_STREAM_CHUNK_MAX (UINT32_C(1) << 30)

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
        uint64_t end;                   /* job-global end of this sender's range */
        uint64_t pos;                   /* job-global offset of the next payload byte to send */
        TcpStreamCursor cur;            /* segment position of @pos */
        uint32_t chunk_size;
        bool crc;
        bool in_chunk;                  /* a header was built and not all of its chunk sent */
        uint32_t hdr_sent;
        uint64_t chunk_end;             /* job-global end of the current chunk */
        int error;                      /* sticky: once a step failed, it keeps failing */
        uint8_t hdr[TCP_STREAM_HEADER_SIZE];
} TcpSender;

/* Embeddable; fields are the module's business (read pos/end for progress). */
typedef struct TcpReceiver {
        uint64_t transfer_id;
        const TcpDstSegment *segs;
        size_t n_segs;
        uint64_t end;                   /* job-global end of this receiver's range */
        uint64_t pos;                   /* job-global offset of the next payload byte expected */
        TcpStreamCursor cur;            /* segment position of @pos */
        bool crc;
        bool in_chunk;                  /* a header was accepted and its payload is arriving */
        uint32_t hdr_got;
        uint64_t chunk_end;
        uint32_t chunk_crc;             /* the header's CRC */
        uint32_t crc_run;               /* CRC32C of the chunk's payload landed so far */
        int error;                      /* sticky */
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
int tcp_sender_init_range(TcpSender *s, uint64_t transfer_id, const TcpSrcSegment *segs,
                          size_t n, uint64_t start, uint64_t end, uint32_t chunk_size, bool crc);

/*
 * Sends on @fd (a connected, non-blocking stream socket) until the socket would block or the
 * range is sent, resuming a partial write exactly where it stopped. Returns 1 when every byte is
 * sent, 0 when the socket would block (call again once it is writable), -errno from sendmsg()
 * otherwise (-EPIPE, -ECONNRESET, ...; no SIGPIPE is raised). An error is sticky.
 */
int tcp_sender_step(TcpSender *s, int fd);

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
 * Reads from @fd (a connected, non-blocking stream socket) until it would block or the range has
 * arrived. Returns 1 when every byte of the range has landed (and passed its CRC), 0 when the
 * socket has nothing more for now (call again once it is readable), or:
 *   -EBADMSG     bad magic, an unknown flag, or a CRC flag (or CRC field) that disagrees with @crc
 *   -EPROTO      wrong transfer id, or a chunk that is empty, is not at the next expected offset
 *                (which also catches offsets outside the range) or runs past the range's end
 *   -EILSEQ      a payload's CRC32C does not match its header
 *   -ECONNRESET  end of stream before the range was complete
 *   -errno       from recv()/recvmsg()
 * An error is sticky, and after one the destination's contents are not to be trusted.
 */
int tcp_receiver_step(TcpReceiver *r, int fd);
