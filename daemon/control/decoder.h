/* SPDX-License-Identifier: MIT */
/*
 * Decoder: decodes big request payloads (a 100,000-block transfer's lists) on a thread of its
 * own, so the control loop serves other clients meanwhile. One job at a time per connection:
 * the connection reads nothing more until its job's callback has run, so its requests keep
 * their order. The callback runs on the loop, never from decoder_submit().
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "proto/frame.h"

struct event_base;
typedef struct Decoder Decoder;
typedef struct DecodeJob DecodeJob;

/*
 * The payload of @len bytes decoded: @r 0 and @msg (the callee's, free with
 * protobuf_c_message_free_unpacked()) with the facts of its long lists (frame_unpack_facts(),
 * @n_facts of them, valid during the call), or a negative errno from frame_unpack() (-EBADMSG:
 * the payload does not decode) and NULL.
 */
typedef void (*decode_done_fn)(DecodeJob *job, size_t len, int r, ProtobufCMessage *msg,
                               const FrameListFacts *facts, size_t n_facts, void *userdata);

/* Starts the thread and hooks its completions into @base. 0, -ENOMEM or another errno. */
int decoder_new(struct event_base *base, Decoder **ret);

/*
 * Stops and joins the thread. Jobs not yet called back are dropped, their callbacks never run:
 * free their owners first (decoder_forget() them). Accepts NULL; returns NULL.
 */
Decoder *decoder_free(Decoder *d);

/*
 * Queues the decoding of @payload (@len bytes, malloc()ed; taken, also on failure) as a
 * @desc message. 0 and *@ret, or -ENOMEM, -ESHUTDOWN.
 */
int decoder_submit(Decoder *d, const ProtobufCMessageDescriptor *desc, uint8_t *payload, size_t len,
                   decode_done_fn done, void *userdata, DecodeJob **ret);

/* The job's owner is gone: its callback will not run, and what it decodes is freed. */
void decoder_forget(DecodeJob *job);
