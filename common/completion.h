/* SPDX-License-Identifier: MIT */
/*
 * Completion: how a request handed down a layer gets its answer without the lower layer knowing
 * who asked. The asker (control/, for a client request) fills in the ops and owns the memory;
 * the holder (transfer/, domain/, link/) answers exactly once through completion_reply(),
 * completion_reply_ok() or completion_fail(), or lets it go unanswered with completion_drop().
 * After any of them the Completion is gone. If the asker goes first, it calls the holder's
 * cancel callback, after which the holder must forget the Completion (the asker frees it).
 */
#pragma once

#include <stddef.h>

#include "common/error.h"

typedef struct Completion Completion;

/* What a lower-layer function returns when it keeps the Completion to answer later. */
#define COMPLETION_PENDING 1

typedef struct CompletionOps {
        /* Answers with @reply, and @fd attached (-1 for none; it stays the caller's). What
         * @reply points to is the asker's business: control/ passes its client reply message,
         * built at the edge. The layers below pass NULL (completion_reply_ok()): an OK answer
         * with nothing more. Returns 0 or negative errno (the answer could not be queued). */
        int (*reply)(Completion *cpl, const void *reply, int fd);
        /* Answers with @status (< 0) and @err's detail (or none when NULL). */
        int (*fail)(Completion *cpl, int status, const Error *err);
        /* Ends without an answer. */
        void (*drop)(Completion *cpl);
} CompletionOps;

struct Completion {
        const CompletionOps *ops; /* the asker's */
        /* The holder's: runs when the asker goes away first. */
        void (*cancel)(Completion *cpl, void *userdata);
        void *userdata;
};

/* Makes @cancel(@cpl, @userdata) run if the asker goes away before the answer. */
static inline void completion_set_cancel(Completion *cpl,
                                         void (*cancel)(Completion *cpl, void *userdata),
                                         void *userdata)
{
        cpl->cancel = cancel;
        cpl->userdata = userdata;
}

/* Answers @cpl with @reply and @fd (see CompletionOps.reply); @cpl is gone afterwards. */
static inline int completion_reply(Completion *cpl, const void *reply, int fd)
{
        cpl->cancel = NULL;
        return cpl->ops->reply(cpl, reply, fd);
}

/* Answers @cpl with only an OK status, and @fd (or -1) attached; @cpl is gone afterwards. */
static inline int completion_reply_ok(Completion *cpl, int fd)
{
        return completion_reply(cpl, NULL, fd);
}

/* Answers @cpl with @status (< 0) and @err's detail; @cpl is gone afterwards. */
static inline int completion_fail(Completion *cpl, int status, const Error *err)
{
        cpl->cancel = NULL;
        return cpl->ops->fail(cpl, status, err);
}

/* Lets @cpl (or NULL) go without an answer. Returns NULL. */
static inline Completion *completion_drop(Completion *cpl)
{
        if (cpl) {
                cpl->cancel = NULL;
                cpl->ops->drop(cpl);
        }
        return NULL;
}
