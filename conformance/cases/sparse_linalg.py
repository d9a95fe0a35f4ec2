def cases(profile):
    return []
