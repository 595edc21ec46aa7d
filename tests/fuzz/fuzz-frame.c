/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the frame decoder: the input is a byte stream of frames as a peer could send
 * it. Each header is decoded; the payload of a known type is unpacked with its request
 * descriptor and, per the header's flags, its reply or Status descriptor; whatever unpacks must
 * pack again and unpack again. Built for libFuzzer, or with
 * fuzz-main.c to replay a corpus.
 */

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/frame.h"
#include "proto/kvdist.pb-c.h"
#include "common/macro.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * protobuf-c accepts field number 0 when the tag is a non-minimal varint (0x80 0x00) and keeps it
 * as an unknown field, which then packs as the one-byte tag 0x00 that it rejects. The codec does
 * not care (unknown fields are ignored), so such messages skip the round trip.
 */
static bool has_field_zero(const ProtobufCMessage *m)
{
        const ProtobufCMessageDescriptor *desc = m->descriptor;

        for (unsigned i = 0; i < m->n_unknown_fields; i++)
                if (m->unknown_fields[i].tag == 0)
                        return true;

        for (unsigned i = 0; i < desc->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &desc->fields[i];
                const uint8_t *member = (const uint8_t *)m + f->offset;

                if (f->type != PROTOBUF_C_TYPE_MESSAGE)
                        continue;
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        size_t n;
                        ProtobufCMessage **subs;

                        memcpy(&n, (const uint8_t *)m + f->quantifier_offset, sizeof(n));
                        memcpy(&subs, member, sizeof(subs));
                        for (size_t k = 0; k < n; k++)
                                if (has_field_zero(subs[k]))
                                        return true;
                } else {
                        ProtobufCMessage *sub;

                        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
                                uint32_t which;

                                memcpy(&which, (const uint8_t *)m + f->quantifier_offset,
                                       sizeof(which));
                                if (which != f->id)
                                        continue;
                        }
                        memcpy(&sub, member, sizeof(sub));
                        if (sub && has_field_zero(sub))
                                return true;
                }
        }
        return false;
}

/* Unpacks @payload with @desc; a message that unpacks must survive a pack/unpack round trip. */
static void fuzz_unpack(const ProtobufCMessageDescriptor *desc, const FrameHeader *h,
                        const uint8_t *payload)
{
        ProtobufCMessage *msg = NULL, *again = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        FrameHeader h2;
        size_t len;

        if (frame_unpack(desc, payload, h->length, &msg) < 0)
                return;
        if (has_field_zero(msg)) {
                protobuf_c_message_free_unpacked(msg, NULL);
                return;
        }

        /* A message rebuilt from a payload of <= max bytes may still pack larger (unknown fields
         * re-packed, non-canonical varints made canonical), so no size limit here. */
        if (frame_pack(h->type, h->flags, h->request_id, h->n_fds, msg, UINT32_MAX, &buf, &len) <
                    0 ||
            frame_header_decode(buf, UINT32_MAX, &h2) < 0 || h2.length != len - FRAME_HEADER_SIZE ||
            frame_unpack(desc, buf + FRAME_HEADER_SIZE, h2.length, &again) < 0)
                abort();

        protobuf_c_message_free_unpacked(again, NULL);
        protobuf_c_message_free_unpacked(msg, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        while (size >= FRAME_HEADER_SIZE) {
                _cleanup_free_ uint8_t *payload = NULL;
                const FrameType *t;
                FrameHeader h;

                if (frame_header_decode(data, FRAME_MAX_PAYLOAD_DEFAULT, &h) < 0)
                        break;
                data += FRAME_HEADER_SIZE;
                size -= FRAME_HEADER_SIZE;
                /* A reader would wait for the rest of a frame that is cut short. */
                if (h.length > size)
                        break;

                /* An exact-size copy, so that reading past the payload is an ASan report. */
                payload = malloc(h.length ?: 1);
                if (!payload)
                        abort();
                memcpy(payload, data, h.length);
                data += h.length;
                size -= h.length;

                t = frame_type_lookup(h.type);
                if (!t)
                        continue;
                fuzz_unpack(t->request, &h, payload);
                if (h.flags & FRAME_FLAG_ERROR)
                        fuzz_unpack(&kvdist__v1__status__descriptor, &h, payload);
                else if (h.flags & FRAME_FLAG_REPLY)
                        fuzz_unpack(t->reply, &h, payload);
        }
        return 0;
}
